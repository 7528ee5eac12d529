"""``kernel doctor``'s look at the files outside the database that hold secrets.

The secrets file (``KERNEL_SECRETS_FILE``) holds the values jobs name, the users file
the token hashes of the console and API, and the var folder the embedded database,
broker and users file: each open to other users of the host gives a secret away (or,
for a hash, a way to guess it offline).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from adapters.secrets import SECRETS_FILE_ENV
from celery_app.project_paths import var_dir
from celery_app.web.users import users_file

__all__ = ["open_secret_files"]

_PRIVATE_FILE = 0o600
_PRIVATE_DIR = 0o700


def open_secret_files(app: Any) -> list[str]:
    """Each secret-holding file or folder other users may read, with the command that
    closes it; empty when all are private (or absent)."""
    wanted = [(users_file(), _PRIVATE_FILE, 0o077), (var_dir(app), _PRIVATE_DIR, 0o007)]
    if secrets := os.environ.get(SECRETS_FILE_ENV):
        wanted.insert(0, (Path(secrets), _PRIVATE_FILE, 0o077))
    # The var folder need only be closed to the world: a group may share a deployment.
    return [
        f"{path} is {mode:04o} (chmod {private:o} {path})"
        for path, private, refused in wanted
        if (mode := _mode(path)) is not None and mode & refused
    ]


def _mode(path: Path) -> int | None:
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return None
