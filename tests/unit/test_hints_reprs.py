"""A hint's argsrepr/kwargsrepr are Celery's ``saferepr`` of the call, whichever way they
are computed (celery_app/hints.py ``call_reprs``: a flat call's ``repr`` when it is the
same text, which is cheaper)."""

from __future__ import annotations

import random
from typing import Any

from celery.utils.saferepr import saferepr

from celery_app.hints import call_reprs

_TEXTS = [
    "", "a", "order-7", 'say "hi"', "it's", "back\\slash", "tab\there", "line\nbreak",
    "é日本", "\u00ad", "\x00", "😀", " ", "x" * 1019, "y" * 1024, "z" * 2000,
]  # fmt: skip
_SCALARS: list[Any] = [
    0,
    1,
    -7,
    10**20,
    True,
    False,
    None,
    0.1,
    -2.5e300,
    float("inf"),
    float("nan"),
    1e-7,
]


def _saferepr_reprs(args: Any, kwargs: Any) -> tuple[str, str]:
    return saferepr(list(args or ()), 1024), saferepr(dict(kwargs or {}), 1024)


def _calls() -> list[tuple[Any, Any]]:
    pick = random.Random(42)
    values: list[Any] = [*_TEXTS, *_SCALARS]
    calls: list[tuple[Any, Any]] = [((), None), ([], {}), ((1, "a"), {"k": 2})]
    for _ in range(400):
        args = [pick.choice(values) for _ in range(pick.randint(0, 6))]
        kwargs = {pick.choice(_TEXTS[:12]): pick.choice(values) for _ in range(pick.randint(0, 4))}
        calls.append((args, kwargs))
    # Around the bound: a call whose repr is just under, at, and just over 1024 characters.
    for size in range(1010, 1030):
        calls.append((["a" * (size - 4)], {"k": "b" * (size - 9)}))
        calls.append(([1] * (size // 3), {}))
    # Lists longer than saferepr can show: a batch's ids, texts, nested lists, objects.
    for items in (341, 342, 343, 500, 5000):
        calls.append((list(range(10**6, 10**6 + items)), {}))
        calls.append(([pick.choice(values) for _ in range(items)], {}))
        calls += [([[i] for i in range(items)], {}), ([object] * items, {}), (["é"] * items, {})]
    # Not flat: nested lists, tuples, dicts, objects keep saferepr's own text.
    calls += [
        ([[1, 2], (3,), {"a": [4]}], {"n": {"deep": [[["x"]]]}}),
        ([b"bytes", {1, 2}, object], {"o": 1j}),
        (["x" * 600, "y" * 600], {"k": "v" * 2000}),
        ([], {1: "int key"}),
    ]
    return calls


def test_a_hints_reprs_are_celerys_saferepr() -> None:
    for args, kwargs in _calls():
        shown = call_reprs({"task": "t", "args": args, "kwargs": kwargs, "request": None})
        assert shown == _saferepr_reprs(args, kwargs), (args, kwargs)


def test_the_calls_own_reprs_are_kept() -> None:
    payload = {"args": [1], "kwargs": {}, "request": {"argsrepr": "(a)", "kwargsrepr": "{b}"}}
    assert call_reprs(payload) == ("(a)", "{b}")
