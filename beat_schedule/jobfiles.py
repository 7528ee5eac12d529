"""Job files: ``{"jobs": [ ... ]}`` in JSON, TOML or YAML, read without surprises.

:func:`load_job_file` parses a file and checks its outer shape; :func:`validate_job_file`
also validates every job with :func:`kernel.spec.jobspec.validate_job_spec` and reports
*every* invalid job at once. :func:`read_job_file` returns the jobs and the file's
optional top-level ``budgets: {NAME: {window, max_runs, max_units}}`` (shared run
budgets jobs name with ``"budget": "NAME"``). Whatever is wrong — unreadable file, a syntax error,
a duplicate key, an unknown field, a bad cron — the error is an
:class:`~kernel.errors.InvalidArgument` that names the file and the line or the field
(``jobs[2].schedule.timezone``); nothing raises anything else.

The format follows the extension (``.json``, ``.toml``, ``.yaml``/``.yml``). YAML is
read by YAML 1.2's core schema (``on``, ``yes``, ``off`` are text) with a safe loader that
also refuses aliases (:mod:`beat_schedule.yaml_dialect`). Duplicate keys are refused in
JSON and YAML, as TOML does, since "the last one wins" silently drops a setting.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from beat_schedule.kinds import KindCheck
from beat_schedule.yaml_dialect import StrictLoader
from kernel import (
    Budget,
    InvalidArgument,
    JobSpec,
    check_limit,
    read_budget,
    text,
    validate_job_spec,
)

__all__ = [
    "JobFile",
    "JobFileInvalid",
    "MAX_FILE_BYTES",
    "MAX_JOBS",
    "load_job_file",
    "read_job_file",
    "validate_job_file",
]

#: Larger files are refused before parsing (many jobs at the 64 KiB payload limit fit).
MAX_FILE_BYTES = 16 * 1024 * 1024
#: More jobs than this in one file is refused.
MAX_JOBS = 10_000
_WORD = re.compile(r"[A-Za-z0-9_-]+")
# "$schema" points an editor at `kernel jobs schema`; the kernel ignores it.
_TOP_LEVEL = ("jobs", "pools", "budgets", "$schema")
_BUDGET_NAME = text(128, re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*"))


class JobFileInvalid(InvalidArgument):
    """A job file that cannot be used; ``file`` and ``field`` say where.

    ``errors`` (in ``details``) lists every problem of every invalid job as
    ``{index, id, field, message}``.
    """

    def __init__(
        self, path: Path, field: str, message: str, *, show_field: bool = True, **details: Any
    ) -> None:
        super().__init__(field, message, file=str(path), **details)
        self.message = f"{path}: {field}: {message}" if show_field else f"{path}: {message}"
        self.args = (self.message,)


@dataclass(frozen=True, slots=True)
class JobFile:
    """A validated job file: its jobs, the limits of its top-level ``pools:`` and its
    shared ``budgets:`` (name -> budget object)."""

    jobs: list[JobSpec]
    pools: dict[str, int] = field(default_factory=dict)
    budgets: dict[str, Budget] = field(default_factory=dict)


class _Syntax(Exception):
    """A parser's complaint: where (a line, a key) and what."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message


def load_job_file(path: str | Path) -> list[dict[str, Any]]:
    """Parse a job file and return its jobs, not yet validated.

    Raises:
        JobFileInvalid: unreadable, too large, not UTF-8, a syntax error (with its
            line), an unsupported extension, or not ``{"jobs": [object, ...]}``.
    """
    file = Path(path)
    return _jobs(file, _load_document(file))


def _load_document(file: Path) -> dict[str, Any]:
    parse = _PARSERS.get(file.suffix.lower())
    if parse is None:
        raise JobFileInvalid(file, "file", "use a .json, .toml, .yaml or .yml file")
    try:
        with file.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise JobFileInvalid(file, "file", f"cannot be read: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise JobFileInvalid(file, "file", f"is larger than {MAX_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise JobFileInvalid(file, "file", f"is not UTF-8 (byte {exc.start})") from None
    try:
        document = parse(text)
    except _Syntax as exc:
        raise JobFileInvalid(file, exc.where, exc.message) from None
    except RecursionError:
        raise JobFileInvalid(file, "file", "nests too deeply") from None
    except ValueError as exc:  # e.g. an integer past Python's digit limit
        raise JobFileInvalid(file, "file", f"syntax error: {exc}") from None
    if not isinstance(document, dict):
        raise JobFileInvalid(file, "file", 'must hold an object: {"jobs": [ ... ]}')
    return document


def validate_job_file(path: str | Path) -> list[JobSpec]:
    """Load a job file and validate every job; all errors are reported together.

    Raises:
        JobFileInvalid: the file does not load, ids repeat, or any job is invalid;
            ``details["errors"]`` lists each problem, ``field`` names the first.
    """
    return read_job_file(path).jobs


def read_job_file(path: str | Path, *, check_kind: KindCheck | None = None) -> JobFile:
    """Load a job file and validate its jobs, its ``pools:`` and its ``budgets:``; all
    errors reported together, for every job (with ``check_kind``, a kind no adapter
    runs is one of them).

    Raises:
        JobFileInvalid: as :func:`validate_job_file`; a pool's or budget's errors have
            ``index`` None and ``field`` ``pools.NAME.limit`` / ``budgets.NAME...``.
    """
    file = Path(path)
    document = _load_document(file)
    raws = _jobs(file, document)
    errors: list[dict[str, Any]] = []
    pools = _pools(document.get("pools", {}), errors)
    budgets = _budgets(file, document.get("budgets", {}), errors)
    specs: list[JobSpec] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(raws):
        raw_id = raw.get("id")
        label = raw_id if isinstance(raw_id, str) else None
        kind = raw.get("kind")
        kind_problem = check_kind(kind) if check_kind and isinstance(kind, str) else None
        if kind_problem is not None:
            errors.append(
                {
                    "index": index,
                    "id": label,
                    "field": f"jobs[{index}].kind",
                    "message": f"kind: {kind_problem}",
                }
            )
        try:
            spec = validate_job_spec(raw)
        except InvalidArgument as exc:
            # One entry per problem: a job with several wrong fields names each of them.
            found = exc.details.get("errors") or [
                {"field": exc.field, "message": exc.message.removeprefix(f"{exc.field}: ")}
            ]
            errors.extend(
                {
                    "index": index,
                    "id": label,
                    "field": f"jobs[{index}].{p['field']}" if p["field"] else f"jobs[{index}]",
                    "message": f"{p['field']}: {p['message']}",
                }
                for p in found
            )
            continue
        if kind_problem is not None:
            continue
        if spec.id in seen:
            errors.append(
                {
                    "index": index,
                    "id": spec.id,
                    "field": f"jobs[{index}].id",
                    "message": f"id: {spec.id!r} is also the id of jobs[{seen[spec.id]}]",
                }
            )
            continue
        seen[spec.id] = index
        specs.append(spec)
    if errors:
        lines = [
            (
                f"jobs[{e['index']}]" + (f" ({e['id']!r})" if e["id"] else "")
                if e["index"] is not None
                else e["field"]
            )
            + f": {e['message']}"
            for e in errors
        ]
        invalid = len({e["index"] for e in errors if e["index"] is not None})
        what = f"{invalid} invalid job(s)" if invalid else "invalid pools or budgets"
        summary = f"{what}, {len(errors)} problem(s), nothing applied:\n  " + "\n  ".join(lines)
        raise JobFileInvalid(file, errors[0]["field"], summary, show_field=False, errors=errors)
    return JobFile(jobs=specs, pools=pools, budgets=budgets)


def _budgets(file: Path, section: object, errors: list[dict[str, Any]]) -> dict[str, Budget]:
    """The ``budgets`` section read; each invalid budget is added to ``errors``."""
    if not isinstance(section, dict):
        raise JobFileInvalid(file, "budgets", "must be an object: {NAME: {budget}, ...}")
    budgets: dict[str, Budget] = {}
    for name, value in section.items():
        try:
            budgets[_BUDGET_NAME(name, "budgets")] = read_budget(value, f"budgets.{name}")
        except InvalidArgument as exc:
            errors.append({"index": None, "id": None, "field": exc.field, "message": exc.message})
    return budgets


def _pools(section: object, errors: list[dict[str, Any]]) -> dict[str, int]:
    """``{"NAME": {"limit": N}}``; each problem appended to ``errors`` as ``{field, message}``."""
    if not isinstance(section, dict):
        errors.append(
            {
                "index": None,
                "id": None,
                "field": "pools",
                "message": 'must be an object: {"NAME": {"limit": N}}',
            }
        )
        return {}
    limits: dict[str, int] = {}
    for name, pool in section.items():
        where = f"pools.{name}" if _WORD.fullmatch(str(name)) else f"pools[{json.dumps(name)}]"
        if not isinstance(pool, dict) or set(pool) != {"limit"}:
            errors.append(
                {"index": None, "id": None, "field": where, "message": 'must be {"limit": N}'}
            )
            continue
        try:
            check_limit(name, pool["limit"])
        except InvalidArgument as exc:
            errors.append(
                {"index": None, "id": None, "field": f"{where}.{exc.field}", "message": exc.message}
            )
            continue
        limits[name] = pool["limit"]
    return limits


def _jobs(file: Path, document: dict[str, Any]) -> list[dict[str, Any]]:
    unknown = sorted(str(key) for key in document if key not in _TOP_LEVEL)
    if unknown:
        name = unknown[0] if _WORD.fullmatch(unknown[0]) else json.dumps(unknown[0])
        raise JobFileInvalid(
            file, name, 'unknown field; a job file holds only "jobs", "pools" and "budgets"'
        )
    if "jobs" not in document:
        raise JobFileInvalid(file, "jobs", "is required")
    jobs = document["jobs"]
    if not isinstance(jobs, list):
        raise JobFileInvalid(file, "jobs", "must be an array of jobs")
    if len(jobs) > MAX_JOBS:
        raise JobFileInvalid(file, "jobs", f"holds {len(jobs)} jobs; at most {MAX_JOBS} per file")
    for index, job in enumerate(jobs):
        if not isinstance(job, dict):
            raise JobFileInvalid(file, f"jobs[{index}]", "must be an object")
    return jobs


# --- parsers ------------------------------------------------------------------------


def _parse_json(text: str) -> object:
    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in pairs:
            if key in result:
                raise _Syntax(f"key {json.dumps(key)}", "duplicate key")
            result[key] = value
        return result

    try:
        return json.loads(text, object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as exc:
        raise _Syntax(
            f"line {exc.lineno}, column {exc.colno}", f"syntax error: {exc.msg}"
        ) from None


def _parse_toml(text: str) -> object:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # its message ends "(at line L, column C)"
        raise _Syntax("syntax error", str(exc)) from None


def _parse_yaml(text: str) -> object:
    try:
        return yaml.load(text, Loader=StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.reader.ReaderError as exc:  # a character YAML refuses: it knows only the offset
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        raise _Syntax(
            f"line {line}, column {column}",
            f"syntax error: {exc.reason} (U+{ord(exc.character):04X})"
            if isinstance(exc.character, str)
            else f"syntax error: {exc.reason}",
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "syntax"
        problem = getattr(exc, "problem", None) or str(exc)
        raise _Syntax(where, f"syntax error: {problem}") from None


_PARSERS: dict[str, Callable[[str], object]] = {
    ".json": _parse_json,
    ".toml": _parse_toml,
    ".yaml": _parse_yaml,
    ".yml": _parse_yaml,
}
