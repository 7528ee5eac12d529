"""The CLI's record view: long values are cut, a closing sentence for a person is not."""

from __future__ import annotations

from celery_app.cli.output import fields


def test_a_note_is_printed_whole_and_other_long_values_cut() -> None:
    note = "it runs task 'x', which has no safe point while it runs: " + "it will finish " * 10
    shown = fields([("payload", "y" * 300), ("note", note)], full_last=True).splitlines()
    assert shown[0].endswith("…") and len(shown[0]) < 140
    assert shown[1].endswith(note.rstrip())
