"""pydantic's validation errors as the kernel's: a field path and a sentence each.

Paths read as they do in a job file (``retry.backoff``, ``payload.argv[2]``,
``payload.headers["X Y"]``); messages are our own, never pydantic's wording or links.
Unknown fields of one section are one problem naming them all, and they come first:
a misspelt key usually explains the other complaints about its section.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from kernel.errors import InvalidArgument
from kernel.spec.durations import child_path
from kernel.spec.fields import ERROR_TYPE

__all__ = ["Problem", "Shape", "problems_of", "raise_problems"]

_MESSAGES = {
    "missing": "is required",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "dict_type": "must be an object",
    "list_type": "must be an array",
    "string_type": "must be a string",
}


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the input: where (a dotted path) and what."""

    field: str
    message: str
    details: dict[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, error: InvalidArgument) -> Problem:
        """The problem an :class:`InvalidArgument` describes."""
        return cls(error.field, error.message.removeprefix(f"{error.field}: "))


@dataclass(frozen=True)
class Shape:
    """Marks a field whose value is validated by ``model`` but stored as something else
    (a schedule is checked by its model and kept as its normalised dict)."""

    model: type[BaseModel]


def path_of(loc: Sequence[int | str], prefix: str = "") -> str:
    """``("retry", "backoff")`` as ``retry.backoff``; indices as ``[2]``."""
    path = prefix
    for part in loc:
        # pydantic's marker after a dict key, and our tags of a union's alternatives.
        if _is_marker(part):
            continue
        path = f"{path}[{part}]" if isinstance(part, int) else child_path(path, part)
    return path


#: Our tags of the unions' alternatives (a budget: kernel.spec.sections; a watchdog's
#: check: kernel.spec.payloads), not keys.
TAGS = frozenset({"<object>", "<name>", "<none>", "<shell>", "<callable>"})


def _is_marker(part: int | str) -> bool:
    """pydantic's ``[key]`` after a dict key, or a tag of a union's alternative."""
    return part == "[key]" or part in TAGS


def _below(path: str, at: str) -> str:
    if not at:
        return path
    if at.startswith("["):
        return f"{path}{at}"
    return f"{path}.{at}" if path else at


def problems_of(error: ValidationError, root: type[BaseModel], prefix: str = "") -> list[Problem]:
    """Every problem pydantic found validating ``root``, paths under ``prefix``."""
    found: list[Problem] = []
    unknown: dict[tuple[int | str, ...], list[str]] = {}
    for item in error.errors(include_url=False):
        loc = tuple(item["loc"])
        kind = item["type"]
        if kind == "extra_forbidden":
            unknown.setdefault(loc[:-1], []).append(str(loc[-1]))
        elif kind == ERROR_TYPE:
            ctx = item["ctx"]
            found.append(Problem(_below(path_of(loc, prefix), ctx["at"]), ctx["message"]))
        else:
            message = _MESSAGES.get(kind) or item["msg"][:1].lower() + item["msg"][1:]
            found.append(Problem(path_of(loc, prefix), message))
    first = [
        Problem(
            child_path(path_of(parent, prefix), names[0]),
            f"unknown field; expected one of {', '.join(_fields_at(root, parent))}",
            {"unknown": names},
        )
        for parent, names in ((p, sorted(n)) for p, n in unknown.items())
    ]
    return first + found


def raise_problems(found: Sequence[Problem]) -> None:
    """Raise one :class:`InvalidArgument` naming the first problem and listing every one."""
    if not found:
        return
    head, rest = found[0], found[1:]
    message = "; ".join([head.message, *(f"{p.field}: {p.message}" for p in rest)])
    details = dict(head.details)
    if rest:
        details["errors"] = [{"field": p.field, "message": p.message} for p in found]
    raise InvalidArgument(head.field, message, **details)


def _fields_at(root: type[BaseModel], loc: Sequence[int | str]) -> list[str]:
    """The field names (as written) of the model found at ``loc`` below ``root``."""
    tp: Any = root
    for part in loc:
        tp = _step(tp, part)
    model = _model(tp)
    if model is None:
        return []
    return [info.alias or name for name, info in model.model_fields.items()]


def _model(tp: Any) -> type[BaseModel] | None:
    for candidate in _alternatives(tp):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _alternatives(tp: Any) -> list[Any]:
    """``tp`` with ``Annotated`` (a :class:`Shape` wins) and unions taken apart."""
    origin = get_origin(tp)
    if origin is Annotated:
        base, *meta = get_args(tp)
        shapes = [m.model for m in meta if isinstance(m, Shape)]
        return shapes or _alternatives(base)
    if origin is Union or origin is types.UnionType:
        return [alt for arg in get_args(tp) for alt in _alternatives(arg)]
    return [tp]


def _step(tp: Any, part: int | str) -> Any:
    if _is_marker(part):
        return tp
    for candidate in _alternatives(tp):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            for name, info in candidate.model_fields.items():
                if part in (name, info.alias):
                    return (
                        info.annotation
                        if not info.metadata
                        else Annotated[info.annotation, *info.metadata]
                    )
        origin, args = get_origin(candidate), get_args(candidate)
        if origin is list and isinstance(part, int):
            return args[0]
        if origin is dict and isinstance(part, str):
            return args[1]
    return None
