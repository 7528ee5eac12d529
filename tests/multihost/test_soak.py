"""The soak's short form: a simulated day of three Beats on one PostgreSQL, judged by the
chaos checker (``bench/soak.py``; the week is ``--days 7``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.long

SOAK = Path(__file__).resolve().parents[2] / "bench" / "soak.py"


@pytest.mark.timeout(300)
def test_a_simulated_day_of_three_beats_loses_and_doubles_nothing(pg_database_url: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(SOAK),
            "--days",
            "1",
            "--beats",
            "3",
            "--database-url",
            pg_database_url,
        ],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    report = f"{done.stdout}\n{done.stderr[-4000:]}"
    assert done.returncode == 0, report
    lines = done.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("fault "))
    rows = {line.split()[0]: line.split() for line in lines[header + 1 :]}
    columns = lines[header].split()
    # Every kind of disturbance happened and firings were owed across them.
    for fault in ("beat_restart", "live_edit", "beats_down", "dst_berlin_gap"):
        assert fault in rows, report
    expected = sum(int(cells[columns.index("expected")]) for cells in rows.values())
    assert expected > 300, report
    assert int(rows["beats_down"][columns.index("skipped")]) >= 1, report
