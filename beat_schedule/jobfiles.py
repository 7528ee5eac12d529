"""Job files (``{"jobs": [...]}`` in JSON, TOML or YAML): read, validate all, or refuse naming file and field."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import yaml

from kernel import InvalidArgument
from kernel.jobspec import validate_job_spec

__all__ = ["MAX_JOB_FILE_BYTES", "load_job_file", "parse_job_file"]

MAX_JOB_FILE_BYTES = 8 * 1024 * 1024
_FORMATS = {".json": "json", ".toml": "toml", ".yaml": "yaml", ".yml": "yaml"}


def _decode(path: Path, text: str) -> Any:
    fmt = _FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise InvalidArgument(str(path), "unknown job file type: use .json, .toml, .yaml or .yml")
    try:
        if fmt == "json":
            return json.loads(text)
        if fmt == "toml":
            return tomllib.loads(text)
        return yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(str(path), f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidArgument(str(path), f"invalid TOML: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InvalidArgument(str(path), f"invalid YAML{where}: {problem}") from None


def parse_job_file(path: Path, text: str) -> list[dict[str, Any]]:
    """Decode and validate every job; the first invalid one refuses the whole file.

    Raises:
        InvalidArgument: ``field`` is ``<file>: jobs[i].<field>`` (or the file alone
            for a syntax error), so nothing is applied from a broken file.
    """
    document = _decode(path, text)
    if not isinstance(document, dict) or set(document) != {"jobs"}:
        raise InvalidArgument(str(path), 'must hold exactly one key, "jobs", with a list of jobs')
    jobs = document["jobs"]
    if not isinstance(jobs, list):
        raise InvalidArgument(f"{path}: jobs", "must be a list")
    seen: dict[str, int] = {}
    for index, raw in enumerate(jobs):
        if not isinstance(raw, dict):
            raise InvalidArgument(f"{path}: jobs[{index}]", "must be an object")
        try:
            spec = validate_job_spec(raw)
        except InvalidArgument as exc:
            raise InvalidArgument(f"{path}: jobs[{index}].{exc.field}", exc.message.split(": ", 1)[-1]) from None
        if spec.id in seen:
            raise InvalidArgument(f"{path}: jobs[{index}].id", f"duplicate id {spec.id!r} (also jobs[{seen[spec.id]}])")
        seen[spec.id] = index
    return jobs


def load_job_file(path: str | Path) -> list[dict[str, Any]]:
    """Read ``path`` and return its validated job specs (raw dicts, ready for ``apply_job``)."""
    file = Path(path)
    try:
        size = file.stat().st_size
        if size > MAX_JOB_FILE_BYTES:
            raise InvalidArgument(str(file), f"is {size} bytes; job files are limited to {MAX_JOB_FILE_BYTES}")
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidArgument(str(file), "no such file") from None
    except UnicodeDecodeError as exc:
        raise InvalidArgument(str(file), f"is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise InvalidArgument(str(file), f"cannot be read: {exc.strerror}") from None
    return parse_job_file(file, text)
