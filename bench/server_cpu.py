"""PostgreSQL's own CPU per settle-and-claim, with ``occurrences``' CHECK constraints spelled
each way, the spellings taking turns in one run (issue 42 item 3).

One process, no Celery: a durable PostgreSQL (started unless ``--postgres-url``) with
``pg_stat_statements``, queued occurrences made up front, then per round and per spelling
a chain of ``Kernel.succeed_and_claim`` (a batch's step: run N settled and run N+1 claimed
in one statement), after three untimed steps that prepare the statement again. Per step:
the server backends' CPU (user + system from ``/proc``, at the clock tick's resolution),
the statement's executor time and WAL records (``pg_stat_statements``), the bench
process's CPU. Spellings: ``compact`` (as shipped, revision 0026), ``portable`` (as before
it, and as SQLite keeps them), ``none`` (no checks: what they cost at all; never shipped).
``--indexes``: the indexes of ``occurrences`` varied the same way, each variant in turn
(:data:`INDEXES`: ``migrated`` as the migrations left them; ``+idempotency-key`` the unique
index revision 0028 dropped, made again; ``before-0029`` the two indexes revision 0029
replaced, made again in place of its own; ``-NAME``: that index dropped for the variant).

    .venv/bin/python bench/server_cpu.py --n 400 --rounds 5
    .venv/bin/python bench/server_cpu.py --spellings compact \
        --indexes migrated,+idempotency-key,-occurrences_job,-occurrences_job_newest
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from bench.kernel_throughput import _prepare  # noqa: E402
from bench.statement_stats import PRELOAD  # noqa: E402
from bench.support import fresh_database, server  # noqa: E402
from kernel import Claim, Kernel  # noqa: E402
from kernel.db.checks import OCCURRENCE_CHECKS, OCCURRENCE_CHECKS_POSTGRESQL  # noqa: E402

SPELLINGS = {"compact": OCCURRENCE_CHECKS_POSTGRESQL, "portable": OCCURRENCE_CHECKS, "none": ()}
OWNER = "server-cpu"
LEASE_S = 300.0
_TICK = os.sysconf("SC_CLK_TCK")


def _cpu(pids: Sequence[int]) -> float:
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / _TICK


def _spell(admin: psycopg.Connection, checks: Sequence[tuple[str, str]]) -> None:
    for name, _ in OCCURRENCE_CHECKS:
        admin.execute(f"ALTER TABLE occurrences DROP CONSTRAINT IF EXISTS {name}")
    for name, condition in checks:
        admin.execute(f"ALTER TABLE occurrences ADD CONSTRAINT {name} CHECK ({condition})")


_SETTLED = "lower(status) IN ('succeeded', 'dead_letter', 'cancelled', 'skipped')"
#: Index variants from the migrated schema, each its DDL and the DDL that undoes it
#: (``-NAME`` drops NAME): the indexes revisions 0028 and 0029 dropped, made again.
INDEXES = {
    "migrated": ("", ""),
    "+idempotency-key": (
        "CREATE UNIQUE INDEX bench_idempotency_key ON occurrences (idempotency_key)",
        "DROP INDEX bench_idempotency_key",
    ),
    "before-0029": (
        "CREATE INDEX bench_prunable ON occurrences (lower(status), settled_at)"
        " WHERE lower(status) IN ('succeeded', 'cancelled', 'skipped');"
        " CREATE INDEX bench_settled_status ON occurrences (status, job_id, settled_at)"
        " WHERE settled_at IS NOT NULL; DROP INDEX occurrences_settled_by_status",
        "DROP INDEX bench_prunable; DROP INDEX bench_settled_status;"
        " CREATE INDEX occurrences_settled_by_status ON occurrences"
        f" (lower(status), settled_at) WHERE {_SETTLED}",
    ),
}


def _vary(admin: psycopg.Connection, variant: str) -> str:
    """Make ``variant`` of the indexes; answers the DDL that undoes it."""
    if variant.startswith("-"):
        name = variant[1:]
        (definition,) = admin.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = %s", (name,)
        ).fetchone() or (None,)
        if definition is None:
            raise SystemExit(f"no index {name}")
        admin.execute(f"DROP INDEX {name}")
        return str(definition)
    make, undo = INDEXES[variant]
    if make:
        admin.execute(make)
    return undo


def _chain(kernel: Kernel, ids: Sequence[int], held: Claim | None = None) -> Claim | None:
    """Settle each of ``ids`` and claim the next in one statement; ``held``: the first's
    claim (else it is claimed first). Returns the last one's claim."""
    held = held or kernel.claim(ids[0], owner=OWNER, lease=LEASE_S)
    for occ_id, next_id in zip(ids, ids[1:], strict=False):
        assert held is not None, occ_id
        held = kernel.succeed_and_claim(
            occ_id, owner=OWNER, fence=held.fence, next_occurrence_id=next_id
        )
    return held


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=400, help="steps timed per round and spelling")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--spellings", default=",".join(SPELLINGS))
    parser.add_argument("--indexes", default="migrated", help="index variants (see INDEXES)")
    parser.add_argument("--postgres-url", help="use this server (with pg_stat_statements)")
    args = parser.parse_args(argv)
    variants = [
        (s, i) for s in args.spellings.split(",") if s for i in args.indexes.split(",") if i
    ]
    per_chain = args.n + 5
    rows: dict[str, list[tuple[float, float, float, float]]] = {
        _label(s, i): [] for s, i in variants
    }
    with ExitStack() as stack:
        pg_url = stack.enter_context(
            server("postgres", args.postgres_url, durable=True, settings=PRELOAD)
        )
        url = stack.enter_context(fresh_database(pg_url, "server-cpu-"))
        ids = _prepare(url, args.rounds * len(variants) * per_chain, "FULL")
        kernel = Kernel.open(url)
        admin = psycopg.connect(url.replace("+psycopg", ""), autocommit=True)
        admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        for r in range(args.rounds):
            for s, i in variants:
                chunk = ids[:per_chain]
                ids = ids[per_chain:]
                _spell(admin, SPELLINGS[s])
                undo = _vary(admin, i)
                # Untimed: the statement is prepared again after the DDL.
                held = _chain(kernel, chunk[:4])
                admin.execute("SELECT pg_stat_statements_reset()")
                pids = [
                    row[0]
                    for row in admin.execute(
                        "SELECT pid FROM pg_stat_activity WHERE backend_type ="
                        " 'client backend' AND pid <> pg_backend_pid()"
                    )
                ]
                server_0, client_0 = _cpu(pids), time.process_time()
                _chain(kernel, chunk[3:], held)
                steps = len(chunk) - 4
                server_s = (_cpu(pids) - server_0) / steps * 1e6
                client_s = (time.process_time() - client_0) / steps * 1e6
                calls, exec_ms, wal = admin.execute(
                    "SELECT calls, total_exec_time, wal_records FROM pg_stat_statements"
                    " WHERE query LIKE '%next_claimed%' ORDER BY calls DESC LIMIT 1"
                ).fetchone() or (1, 0.0, 0)
                if undo:
                    admin.execute(undo)
                row = (server_s, exec_ms / calls * 1000, wal / calls, client_s)
                rows[_label(s, i)].append(row)
                cells = "".join(f" {v:8.1f}" for v in row)
                print(f"round {r} {_label(s, i):<9}{cells}", flush=True)
        admin.close()
        kernel.close()
    print(f"\nper settle-and-claim, {args.n} per round, {args.rounds} rounds: median / lowest")
    heads = ("server µs", "executor µs", "WAL records", "bench µs")
    print(f"{'variant':<10}" + "".join(f"{h:>18}" for h in heads))
    for s, got in rows.items():
        cells = [f"{statistics.median(c):8.0f} /{min(c):7.0f}" for c in zip(*got, strict=True)]
        print(f"{s:<10}" + "".join(f"{c:>18}" for c in cells))
    return 0


def _label(spelling: str, indexes: str) -> str:
    return spelling if indexes == "migrated" else f"{spelling} {indexes}"


if __name__ == "__main__":
    sys.exit(main())
