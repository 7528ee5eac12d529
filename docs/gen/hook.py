"""The MkDocs hook (``hooks:`` in mkdocs.yml) that adds the generated reference pages.

They exist only in the built site, made from the code at each build: nothing to forget
to regenerate.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

# MkDocs loads a hook by its file path; its package is imported from the project root.
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from mkdocs.structure.files import File, Files  # noqa: E402

from docs.gen.cli import cli_page  # noqa: E402
from docs.gen.http_api import http_api_page  # noqa: E402
from docs.gen.job_file import job_file_page  # noqa: E402
from docs.gen.states import states_page  # noqa: E402

#: Each generated page's path in the site's sources, and what renders it.
PAGES: dict[str, Callable[[], str]] = {
    "reference/job-file.md": job_file_page,
    "reference/cli.md": cli_page,
    "reference/http-api.md": http_api_page,
    "reference/states.md": states_page,
}


def on_files(files: Files, config: Any) -> Files:
    for src_uri, render in PAGES.items():
        files.append(File.generated(config, src_uri, content=render()))
    return files
