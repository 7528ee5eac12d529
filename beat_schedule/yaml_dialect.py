"""YAML as job files read it: YAML 1.2's core schema on PyYAML, strict and safe.

PyYAML resolves plain scalars by YAML 1.1, where ``on``, ``off``, ``yes`` and ``no`` are
booleans, ``012`` is octal, ``1:30`` is 90 and ``2030-01-01`` a date: ``notify: {on: ...}``
would arrive with the key ``True``. YAML 1.2's core schema keeps booleans to
``true``/``false`` and numbers to what JSON would read, leaving the rest text, which is
what a person writing a job file means. Aliases (``*name``: a few hundred bytes can
expand to gigabytes) and duplicate keys ("the last one wins" drops a setting silently)
are refused.

:class:`Dumper` writes what every YAML reader, 1.1 or 1.2, reads back the same: it quotes
a string that either version would take for something else.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

__all__ = ["Dumper", "StrictLoader", "dump"]

_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_NULL = "tag:yaml.org,2002:null"
_DIGITS = list("-+0123456789")
#: YAML 1.2 core schema (spec section 10.3.2): tag, pattern, the characters it may start with.
_CORE: tuple[tuple[str, re.Pattern[str], list[str]], ...] = (
    (_NULL, re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""]),
    (_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")),
    (_INT, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), _DIGITS),
    (
        _FLOAT,
        re.compile(
            r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
        ),
        [*_DIGITS, "."],
    ),
)


def _resolvers(base: dict[Any, list[tuple[str, Any]]] | None) -> dict[Any, list[Any]]:
    table: dict[Any, list[Any]] = {k: list(v) for k, v in (base or {}).items()}
    for tag, pattern, first in _CORE:
        for char in first:
            table.setdefault(char, []).append((tag, pattern))
    return table


class StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2 core resolution, refusing aliases and
    duplicate keys (both as :class:`yaml.MarkedYAMLError`, with the place)."""

    yaml_implicit_resolvers = _resolvers(None)

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise yaml.MarkedYAMLError(
                problem="aliases (*name) are not supported in job files", problem_mark=mark
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: the base class reports it
                break
            if duplicate:
                raise yaml.MarkedYAMLError(
                    problem=f"duplicate key {key!r}", problem_mark=key_node.start_mark
                )
        return super().construct_mapping(node, deep=deep)


def _construct_int(loader: StrictLoader, node: Any) -> int:
    # PyYAML's own reads "012" as octal (YAML 1.1); in 1.2 it is twelve.
    value = str(loader.construct_scalar(node))
    if value.startswith(("0o", "0x")):
        return int(value[2:], 8 if value[1] == "o" else 16)
    return int(value, 10)


StrictLoader.add_constructor(_INT, _construct_int)


class Dumper(yaml.SafeDumper):
    """A safe dumper quoting every string YAML 1.1 or 1.2 would read as another type."""

    yaml_implicit_resolvers = _resolvers(yaml.SafeDumper.yaml_implicit_resolvers)


def dump(data: Any) -> str:
    """``data`` as block YAML, keys in their given order, unicode kept."""
    text: str = yaml.dump(data, Dumper=Dumper, sort_keys=False, allow_unicode=True, width=100)
    return text
