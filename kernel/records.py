"""Rows to frozen records, and the JSON and time conversions they need."""

from __future__ import annotations

import contextlib
import json
import marshal
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from kernel.errors import InvalidArgument
from kernel.states import ControlState, OccurrenceStatus
from kernel.types import Beat, Control, Event, Job, Occurrence

__all__ = [
    "CHECKPOINT_SCHEMA_VERSION",
    "MAX_CHECKPOINT_BYTES",
    "MAX_RESULT_BYTES",
    "checkpoint_copy",
    "checkpoint_envelope",
    "checkpoint_data",
    "to_dt",
    "from_dt",
    "dumps",
    "loads",
    "stored_result",
    "job_from_row",
    "occurrence_from_row",
    "occurrence_from_mapping",
    "OCCURRENCE_COLUMNS",
    "control_from_row",
    "event_from_row",
    "beat_from_row",
]


def to_dt(ms: int | None) -> datetime | None:
    return None if ms is None else _dt(ms)


def from_dt(value: datetime) -> int:
    if value.tzinfo is None:
        raise ValueError("naive datetime: the kernel only takes timezone-aware times")
    return int(value.timestamp() * 1000)


#: Built once: ``json.dumps`` with options builds an encoder per call, and every
#: claim and settle writes JSON.
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def dumps(value: Any) -> str:
    """Canonical JSON: the same value always gives the same text."""
    if value is None:  # a success's usual result: the encoder's two Python calls for "null"
        return "null"
    return _CANONICAL.encode(value)


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


#: The most a run's result may take as canonical JSON; past it (or not JSON at all) the
#: kernel keeps its type and a bounded repr (:func:`stored_result`). Above every adapter's
#: own bound on what it reports (a shell job's two streams at ``output_limit`` <= 10 MiB
#: each, escaped; an http body's 64 KiB), so only a task's own return value can pass it.
MAX_RESULT_BYTES = 64 * 1024 * 1024
#: The characters of a repr kept for a result the kernel cannot store as it is.
_RESULT_REPR_CHARS = 1000


def stored_result(value: Any) -> Any:
    """What the kernel keeps of a run's result: ``value`` when it is JSON of at most
    :data:`MAX_RESULT_BYTES`, else ``{"unstored_result": {type, repr, reason}}`` — a run
    that returned an object (or a huge value) still settles, and the row says why its
    value is not there."""
    if value is None or isinstance(value, bool | int | str) and len(str(value)) < 1024:
        return value  # the common case, without encoding it twice
    try:
        size = len(dumps(value).encode())
    except (TypeError, ValueError) as exc:
        reason = f"not JSON ({exc})"
    else:
        if size <= MAX_RESULT_BYTES:
            return value
        reason = f"{size} bytes of JSON, over the kernel's {MAX_RESULT_BYTES}-byte bound"
    kind = type(value)
    return {
        "unstored_result": {
            "type": f"{kind.__module__}.{kind.__qualname__}",
            "repr": repr(value)[:_RESULT_REPR_CHARS],
            "reason": reason,
        }
    }


#: The stored checkpoint's envelope version; ``data`` is what the adapter gave.
CHECKPOINT_SCHEMA_VERSION = 1
#: The most a checkpoint's data may take as canonical JSON (SPEC §4).
MAX_CHECKPOINT_BYTES = 64 * 1024
_ENVELOPE_KEYS = frozenset({"schema_version", "safe_point", "data"})


def _bounded(data: Any) -> str:
    encoded = dumps(data)
    if len(encoded.encode()) > MAX_CHECKPOINT_BYTES:
        raise InvalidArgument(
            "checkpoint", f"exceeds {MAX_CHECKPOINT_BYTES} bytes as canonical JSON"
        )
    return encoded


def checkpoint_copy(data: Any) -> Any:
    """``data`` as a checkpoint keeps it: a copy through canonical JSON, so later changes
    to the caller's object do not reach it.

    Raises:
        InvalidArgument: ``data`` exceeds ``MAX_CHECKPOINT_BYTES`` as canonical JSON.
    """
    return json.loads(_bounded(data))


def checkpoint_envelope(safe_point: str, data: Any) -> str:
    """The checkpoint as stored: ``{schema_version, safe_point, data}``, canonical JSON.

    Raises:
        InvalidArgument: ``data`` exceeds ``MAX_CHECKPOINT_BYTES`` as canonical JSON.
    """
    _bounded(data)
    return dumps(
        {"schema_version": CHECKPOINT_SCHEMA_VERSION, "safe_point": safe_point, "data": data}
    )


def checkpoint_data(text: str | None) -> Any:
    """The adapter's data of a stored checkpoint; rows written before the envelope
    hold the data itself."""
    stored = loads(text)
    if isinstance(stored, dict) and stored.keys() == _ENVELOPE_KEYS:
        return stored["data"]
    return stored


def _dt(ms: int) -> datetime:
    # The zone passed by position: its keyword costs a third more, five times a claim.
    return datetime.fromtimestamp(ms / 1000, UTC)


def job_from_row(row: sa.Row[Any]) -> Job:
    m = row._mapping
    return Job(
        id=m["id"],
        revision=m["revision"],
        digest=m["digest"],
        spec=json.loads(m["spec"]),
        enabled=bool(m["enabled"]),
        planned=bool(m["planned"]),
        next_fire_at=to_dt(m["next_fire_at"]),
        next_trigger_key=m["next_trigger_key"],
        defined_at=_dt(m["defined_at"]),
        updated_at=_dt(m["updated_at"]),
    )


def control_from_row(row: sa.Row[Any] | None) -> Control | None:
    if row is None:
        return None
    m = row._mapping
    return Control(
        state=ControlState(m["state"]),
        revision=m["revision"],
        expected_fence=m["expected_fence"],
        pause_request_id=m["pause_request_id"],
        resume_request_id=m["resume_request_id"],
        safe_points=tuple(json.loads(m["safe_points"])),
        requested_at=to_dt(m["requested_at"]),
        paused_at=to_dt(m["paused_at"]),
    )


def occurrence_from_row(row: sa.Row[Any], control_row: sa.Row[Any] | None = None) -> Occurrence:
    return occurrence_from_mapping(row._mapping, control_row)


#: The columns :func:`occurrence_from_mapping` reads: what a claim's statement returns
#: (kernel/statements/claims.py). Its other columns cost the driver a value each and are
#: read by nothing a claim answers (bench/README.md, session 23).
OCCURRENCE_COLUMNS = (
    "id",
    "job_id",
    "job_revision",
    "trigger_key",
    "scheduled_for",
    "status",
    "attempt",
    "max_attempts",
    "fence",
    "lease_owner",
    "lease_expires_at",
    "available_at",
    "dispatched_at",
    "definition",
    "last_error",
    "result",
    "skip_reason",
    "cancel_requested",
    "created_at",
    "updated_at",
    "settled_at",
    "checkpoint",
    "approval_due_at",
    "expires_at",
)


#: Each status by its stored value: a dict lookup, where calling the enum goes through its
#: metaclass (two Python calls, on every claim).
_STATUSES = {status.value: status for status in OccurrenceStatus}


#: Per job revision: the last definition text an occurrence of it was read with, and once
#: read twice in a row, that text's parse as ``marshal`` bytes. Each occurrence still gets
#: objects of its own (job code may change its ``definition``); unmarshalling them is
#: cheaper than parsing the JSON again, on every claim (bench/README.md, session 27). An
#: ad hoc run's snapshot carries its own arguments: its text differs from the last one,
#: and it is parsed as before.
_DEFINITIONS: dict[tuple[str, int], tuple[str, bytes | None]] = {}
#: Job revisions kept (a process claiming for more starts over).
_DEFINITIONS_KEPT = 256


def _definition(job_id: str, revision: int, text: str) -> dict[str, Any]:
    """The parse of an occurrence's definition ``text`` (as ``json.loads`` gives it)."""
    key = (job_id, revision)
    kept = _DEFINITIONS.get(key)
    if kept is not None and kept[0] == text:
        if kept[1] is not None:
            parsed: dict[str, Any] = marshal.loads(kept[1])
            return parsed
        parsed = json.loads(text)
        with contextlib.suppress(ValueError):  # nested past marshal's depth: parsed each time
            _DEFINITIONS[key] = (text, marshal.dumps(parsed))
        return parsed
    if len(_DEFINITIONS) >= _DEFINITIONS_KEPT:
        _DEFINITIONS.clear()
    _DEFINITIONS[key] = (text, None)
    parsed = json.loads(text)
    return parsed


def occurrence_from_mapping(
    m: Mapping[Any, Any], control_row: sa.Row[Any] | None = None
) -> Occurrence:
    """An occurrence from its columns by name (:data:`OCCURRENCE_COLUMNS`: a row's mapping,
    or a dict of a driver's tuple: kernel/transitions/fast_lane.py)."""
    control = control_from_row(control_row)
    return Occurrence(
        id=m["id"],
        job_id=m["job_id"],
        job_revision=m["job_revision"],
        trigger_key=m["trigger_key"],
        scheduled_for=_dt(m["scheduled_for"]),
        # A value no member has (none is stored) still raises the enum's own ValueError.
        status=_STATUSES.get(m["status"]) or OccurrenceStatus(m["status"]),
        attempt=m["attempt"],
        max_attempts=m["max_attempts"],
        fence=m["fence"],
        lease_owner=m["lease_owner"],
        lease_expires_at=to_dt(m["lease_expires_at"]),
        available_at=_dt(m["available_at"]),
        dispatched_at=to_dt(m["dispatched_at"]),
        definition=_definition(m["job_id"], m["job_revision"], m["definition"]),
        last_error=loads(m["last_error"]),
        result=loads(m["result"]),
        skip_reason=m["skip_reason"],
        cancel_requested=bool(m["cancel_requested"]),
        created_at=_dt(m["created_at"]),
        updated_at=_dt(m["updated_at"]),
        settled_at=to_dt(m["settled_at"]),
        control=control,
        checkpoint=checkpoint_data(m["checkpoint"]),
        approval_due_at=to_dt(m["approval_due_at"]),
        expires_at=to_dt(m["expires_at"]),
    )


def event_from_row(row: sa.Row[Any]) -> Event:
    m = row._mapping
    return Event(
        id=m["id"],
        type=m["type"],
        job_id=m["job_id"],
        occurrence_id=m["occurrence_id"],
        fence=m["fence"],
        at=_dt(m["at"]),
        data=json.loads(m["data"]),
    )


def beat_from_row(row: sa.Row[Any]) -> Beat:
    m = row._mapping
    return Beat(
        id=m["id"],
        host=m["host"],
        interval_s=m["interval_s"],
        last_tick_at=_dt(m["last_tick_at"]),
        started_at=_dt(m["started_at"]),
    )
