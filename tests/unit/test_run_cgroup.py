"""What a shell run whose supervisor was killed leaves in its cgroup, and who removes it.

Real cgroups (v2, with ``cgroup.kill``), made under this process's own; skipped where the
host gives none.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from unit.adapter_support import make_context, make_occurrence
from unit.test_adapters_shell import alive

from adapters.run_cgroup import cgroup_name
from adapters.shell import ShellAdapter
from adapters.supervisor import CGROUP, cgroup_home, containment, remove_cgroup

pytestmark = pytest.mark.skipif(
    containment()[0] != CGROUP, reason=f"this host gives no cgroup: {containment()[1]}"
)

# argv: a file of pids, one a line. Prints those it finds alive (a zombie is dead).
SEES_ALIVE = textwrap.dedent(
    """
    import sys
    for pid in open(sys.argv[1]).read().split():
        try:
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            continue
        if stat.rpartition(")")[2].split()[0] not in ("Z", "X"):
            print(pid)
    """
)


@pytest.fixture
def cgroups() -> Iterator[list[Path]]:
    """Cgroups a test makes; whatever is left of them is killed and removed after it."""
    made: list[Path] = []
    yield made
    for cgroup in made:
        remove_cgroup(cgroup)


def a_run_left_in(cgroup: Path) -> subprocess.Popen[bytes]:
    """A process in ``cgroup`` and a session of its own, as a run's ``setsid`` child is."""
    cgroup.mkdir()
    return subprocess.Popen(
        ["sleep", "60"],
        start_new_session=True,
        preexec_fn=lambda: (cgroup / "cgroup.procs").write_text("0"),
    )


def test_a_claim_kills_what_earlier_fences_left_before_it_starts(
    tmp_path: Path, cgroups: list[Path]
) -> None:
    home = cgroup_home()
    assert home is not None
    pids = tmp_path / "pids"
    payload = {"argv": [sys.executable, "-c", SEES_ALIVE, str(pids)]}
    ctx = make_context("shell", payload)
    first = ctx.occurrence
    names = {
        "fence 1": cgroup_name(first),
        "fence 2": cgroup_name(dataclasses.replace(first, fence=2)),
        "a later claim": cgroup_name(dataclasses.replace(first, fence=4)),
        "another occurrence 7": cgroup_name(make_occurrence("shell", payload)),
    }
    cgroups += [home / name for name in names.values()]
    left = {what: a_run_left_in(home / name) for what, name in names.items()}
    pids.write_text(f"{left['fence 1'].pid}\n{left['fence 2'].pid}\n")
    ctx.occurrence = dataclasses.replace(first, attempt=3, fence=3)
    try:
        result = ShellAdapter().execute(ctx)

        assert result["stdout"] == "", "the command started beside an earlier run's processes"
        for what in ("fence 1", "fence 2"):
            assert not alive(left[what].pid), what
            assert not (home / names[what]).exists(), what
        for what in ("a later claim", "another occurrence 7"):
            assert alive(left[what].pid), what
        assert not (home / cgroup_name(ctx.occurrence)).exists()
    finally:
        for process in left.values():
            process.kill()
            process.wait()
