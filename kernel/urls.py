"""Database URLs as people may see them: the password hidden."""

from __future__ import annotations

import re

import sqlalchemy as sa

__all__ = ["masked_url"]

_USERINFO_PASSWORD = re.compile(r"(//[^/:@]*:)[^/@]*@")


def masked_url(url: str) -> str:
    """``url`` with any password replaced by ``***``, fit for logs and error messages."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except (sa.exc.ArgumentError, ValueError):
        return _USERINFO_PASSWORD.sub(r"\1***@", url)
