"""A shell run's cgroup, named so that what a dead supervisor leaves can be found and killed.

The supervisor (:mod:`adapters.supervisor`) runs the command in a cgroup v2 made under its
own, which is the worker's. While it lives it kills and removes that cgroup itself. Killed
first (SIGKILL, the OOM killer), nothing of it is left to do so, and whatever the command
started in a session of its own would run on beside the retry. So the cgroup is named
after the occurrence and the fence of the claim (:func:`cgroup_name`), and
:func:`remove_leftovers` kills and removes those of an occurrence up to a fence: the worker
calls it once its supervisor has gone (before it settles the run), and every claim of the
occurrence calls it before it starts the command (after a worker that died with its
supervisor, it is the next claim, on any worker of the host whose cgroup is the same).
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

from adapters.supervisor import cgroup_home, remove_cgroup
from kernel import Occurrence

__all__ = ["cgroup_name", "remove_leftovers"]

Logger = logging.Logger | logging.LoggerAdapter[Any]


def cgroup_name(occurrence: Occurrence) -> str:
    """``kernel-occ-ID-TAG-fence-N``: the cgroup of ``occurrence``'s run at its fence.

    ``TAG`` is a digest of the job id and the occurrence's creation time: two kernels on
    one host (two databases) each have an occurrence 1, and must not kill each other's runs.
    """
    return f"{_prefix(occurrence)}{occurrence.fence}"


def remove_leftovers(occurrence: Occurrence, logger: Logger) -> list[Path]:
    """Kill and remove the cgroups of ``occurrence``'s runs at its fence and earlier ones
    (each one removed is logged to ``logger``).

    Returns:
        Those that could not be removed (a process that may not be signalled, or would
        not die).
    """
    home = cgroup_home()
    if home is None:
        return []
    prefix = _prefix(occurrence)
    stuck: list[Path] = []
    for cgroup in sorted(home.glob(f"{prefix}*")):
        fence = cgroup.name.removeprefix(prefix)
        # A later fence is a newer claim's run, alive and not ours to touch.
        if not fence.isdigit() or int(fence) > occurrence.fence:
            continue
        if not remove_cgroup(cgroup):
            stuck.append(cgroup)
            continue
        logger.warning(
            "killed and removed %s, left by a run of occurrence %s whose supervisor was killed",
            cgroup,
            occurrence.id,
            extra={"action": "shell_leftovers_removed", "occurrence_id": occurrence.id},
        )
    return stuck


def _prefix(occurrence: Occurrence) -> str:
    identity = f"{occurrence.job_id}\0{occurrence.created_at.isoformat()}"
    tag = hashlib.sha256(identity.encode()).hexdigest()[:12]
    return f"kernel-occ-{occurrence.id}-{tag}-fence-"
