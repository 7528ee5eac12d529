"""One racing worker process: claim_next and settle until nothing is left.

Run as ``python race_worker.py URL NAME OUT``. About one settle in twenty is first
attempted with a stale fence and once more under another owner's name; whether the
kernel accepted either is written to OUT (one JSON line per attempt) with every claim.
"""

from __future__ import annotations

import json
import random
import sys

from kernel import Kernel, LeaseLost


def main(url: str, name: str, out: str) -> None:
    kernel = Kernel.open(url)
    rng = random.Random(name)
    idle = 0
    with open(out, "w") as log:
        while idle < 20:
            claim = kernel.claim_next(owner=name, lease=120)
            if claim is None:
                idle += 1
                continue
            idle = 0
            occ = claim.occurrence.id
            log.write(json.dumps({"claim": occ, "fence": claim.fence}) + "\n")
            if rng.random() < 0.05:
                for owner, fence in ((name, claim.fence - 1), (f"{name}-impostor", claim.fence)):
                    try:
                        kernel.succeed(occ, owner=owner, fence=fence, result="stale")
                        accepted = True
                    except LeaseLost:
                        accepted = False
                    log.write(json.dumps({"stale": occ, "accepted": accepted}) + "\n")
            kernel.succeed(occ, owner=name, fence=claim.fence, result=name)
    kernel.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])
