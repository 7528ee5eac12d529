"""One racing worker process: claim_next and settle until nothing is left.

Run as ``python race_worker.py URL NAME OUT GO``. The worker opens its kernel, creates
OUT and waits for the file GO, so that every worker starts racing at once. About one
settle in twenty is preceded by writes that must be refused: a settle with a stale
fence, a settle and a renew under another owner's name, and a second settle of a run
this worker settled before. Every claim, and whether the kernel accepted each of those
writes, is written to OUT (one JSON line each).
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

from kernel import Kernel, LeaseLost

__all__ = ["main", "stale_writes"]

LEASE_S = 120


def stale_writes(
    kernel: Kernel,
    name: str,
    occ: int,
    fence: int,
    old: tuple[int, int] | None,
) -> list[bool]:
    """Writes naming an (owner, fence) without the lease; whether the kernel accepted each."""
    impostor = f"{name}-impostor"
    writes: list[Callable[[], object]] = [
        lambda: kernel.succeed(occ, owner=name, fence=fence - 1, result="stale"),
        lambda: kernel.succeed(occ, owner=impostor, fence=fence, result="stale"),
        lambda: kernel.renew(occ, owner=impostor, fence=fence, lease=LEASE_S),
    ]
    if old is not None:  # a run this worker already settled
        writes.append(lambda: kernel.succeed(old[0], owner=name, fence=old[1], result="stale"))
    accepted = []
    for write in writes:
        try:
            write()
            accepted.append(True)
        except LeaseLost:
            accepted.append(False)
    return accepted


def main(url: str, name: str, out: str, go: str) -> None:
    kernel = Kernel.open(url)
    rng = random.Random(name)
    settled: list[tuple[int, int]] = []  # (occurrence, fence) this worker settled
    idle = 0
    with open(out, "w") as log:
        log.flush()  # OUT exists: this worker is ready
        while not Path(go).exists():
            time.sleep(0.005)
        while idle < 20:
            claim = kernel.claim_next(owner=name, lease=LEASE_S)
            if claim is None:
                idle += 1
                continue
            idle = 0
            occ, fence = claim.occurrence.id, claim.fence
            log.write(json.dumps({"claim": occ, "fence": fence}) + "\n")
            if rng.random() < 0.05:
                old = rng.choice(settled) if settled else None
                for accepted in stale_writes(kernel, name, occ, fence, old):
                    log.write(json.dumps({"stale": occ, "accepted": accepted}) + "\n")
            kernel.succeed(occ, owner=name, fence=fence, result=name)
            settled.append((occ, fence))
    kernel.close()


if __name__ == "__main__":
    main(*sys.argv[1:5])
