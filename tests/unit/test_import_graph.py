"""tests/import_graph.py: cycles found, and the longest chain counted with a cycle as one step."""

from __future__ import annotations

from tests.import_graph import cycles, longest_chain


def test_cycles_and_the_longest_chain_through_one() -> None:
    arrows = {"a": {"b"}, "b": {"c"}, "c": {"b", "d"}, "d": set(), "e": {"e"}, "f": {"d"}}
    assert sorted(cycles(arrows)) == [["b", "c"], ["e"]]
    assert longest_chain(arrows) == ["a", "b | c", "d"]
    assert cycles({"a": {"b"}, "b": set()}) == []
    assert longest_chain({}) == []
