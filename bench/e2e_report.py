"""``end_to_end.py``'s samples and the tables it prints from them, with issue 22's targets."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from bench.latency import percentiles
from bench.statement_stats import StatementCost
from bench.support import CpuMeter

__all__ = ["Sample", "cpu_table", "latency_table", "rate_table", "statements_table"]

CPU_PARTS = ("main", "pool", "bench", "others")

#: Issue 22's targets: the backlog's and the shallow case's rate against stock Celery by
#: body (no-op, sleep:10, sleep:100 at concurrency 8), the worker's extra memory as PSS,
#: the shallow case's extra CPU and its pool's context switches per run, the latency.
BACKLOG_TARGET = 1.0
SINGLE_TARGET = {
    0: {"sqlite": 0.65, "postgres": 0.55},
    10: {"sqlite": 0.8, "postgres": 0.7},
    100: {"sqlite": 0.97, "postgres": 0.97},
}
PSS_TARGET_MB = 40
CPU_TARGET_MS = {"sqlite": 0.8, "postgres": 1.2}
SWITCHES_TARGET = 6
LATENCY_TARGET_MS = (5.0, 20.0)


@dataclass(frozen=True)
class Sample:
    backend: str
    side: str
    n: int
    seconds: float
    rss_mb: float = 0.0
    pss_mb: float = 0.0
    cpu: CpuMeter | None = None
    statements: tuple[StatementCost, ...] = ()

    @property
    def rate(self) -> float:
        return self.n / self.seconds


def _verdict(target: str, met: bool) -> str:
    return f"{target}: {'met' if met else 'NOT met'}"


def _median_rate(samples: list[Sample], backend: str, side: str) -> float:
    rates = [s.rate for s in samples if (s.backend, s.side) == (backend, side)]
    return statistics.median(rates) if rates else 0.0


def rate_table(samples: list[Sample], sides: tuple[str, ...], sleep_ms: int) -> str:
    """Median rate and peak RSS / PSS per (backend, side); ratios of the medians to stock Celery."""
    rss: dict[tuple[str, str], float] = {}
    pss: dict[tuple[str, str], float] = {}
    for s in samples:
        key = (s.backend, s.side)
        rss[key] = max(rss.get(key, 0.0), s.rss_mb)
        pss[key] = max(pss.get(key, 0.0), s.pss_mb)
    rows = [
        f"{'backend':<9} {'side':<13} {'per s':>7} {'/stock':>7} {'/stock+E':>9} "
        f"{'RSS MB':>7} {'RSS-stock':>10} {'PSS MB':>7} {'PSS-stock':>10}"
    ]
    for backend in dict.fromkeys(s.backend for s in samples):
        stock = _median_rate(samples, backend, "stock")
        events = _median_rate(samples, backend, "stock+E")
        for side in sides:
            if not any((s.backend, s.side) == (backend, side) for s in samples):
                continue  # a side this back end has not (floor-sql on SQLite)
            rate, key = _median_rate(samples, backend, side), (backend, side)
            vs = [f"{rate / base:.2f}" if rate and base else "-" for base in (stock, events)]
            extra_rss = rss.get(key, 0.0) - rss.get((backend, "stock"), 0.0)
            extra_pss = pss.get(key, 0.0) - pss.get((backend, "stock"), 0.0)
            rows.append(
                f"{backend:<9} {side:<13} {rate:>7.0f} {vs[0]:>7} {vs[1]:>9} "
                f"{rss.get(key, 0.0):>7.1f} {extra_rss:>+10.1f} {pss.get(key, 0.0):>7.1f} "
                f"{extra_pss:>+10.1f}"
            )
        pair = _median_rate(samples, backend, "pair")
        rows.append(f"{backend:<9} {'pair ms':<13} {1000 / pair if pair else 0:>7.2f}")
        if not stock:
            continue
        backlog = _median_rate(samples, backend, "kernel") / stock
        single = _median_rate(samples, backend, "kernel-single") / stock
        single_target = SINGLE_TARGET.get(sleep_ms, {}).get(backend)
        extra_mb = pss.get((backend, "kernel"), 0.0) - pss.get((backend, "stock"), 0.0)
        verdicts = [
            _verdict(f"kernel PSS <= stock + {PSS_TARGET_MB} MB", extra_mb <= PSS_TARGET_MB)
        ]
        if sleep_ms == 0:
            verdicts.insert(0, _verdict(f"kernel >= {BACKLOG_TARGET} x stock", backlog >= 1.0))
        if single_target is not None:
            verdicts.insert(
                -1,
                _verdict(f"kernel-single >= {single_target} x stock", single >= single_target),
            )
        rows.append(f"{backend:<9} {'targets':<13} " + "; ".join(verdicts))
    return "\n".join(rows)


def cpu_table(samples: list[Sample]) -> str:
    """Median CPU ms per run by part, the pool's context switches per run, and how busy the
    machine was, per (backend, side); ``+stock`` is the total less stock's."""
    rows = [
        f"{'backend':<9} {'side':<13} "
        + " ".join(f"{part:>7}" for part in CPU_PARTS)
        + f" {'total':>7} {'+stock':>7} {'pool cs':>7} {'busy':>6}"
    ]
    keys = dict.fromkeys((s.backend, s.side) for s in samples if s.cpu and s.cpu.parts)
    totals: dict[tuple[str, str], float] = {}
    lines: list[tuple[str, str, str, str]] = []
    for backend, side in keys:
        runs = [s for s in samples if (s.backend, s.side) == (backend, side) and s.cpu]
        per_run = {
            part: statistics.median(1000 * s.cpu.parts[part] / s.n for s in runs if s.cpu)
            for part in CPU_PARTS
        }
        switches = statistics.median(s.cpu.pool_switches / s.n for s in runs if s.cpu)
        busy = statistics.median(s.cpu.busy_share for s in runs if s.cpu)
        totals[(backend, side)] = sum(per_run.values())
        head = f"{backend:<9} {side:<13} " + " ".join(f"{per_run[p]:>7.2f}" for p in CPU_PARTS)
        lines.append((backend, side, head, f"{switches:>7.1f} {busy:>6.0%}"))
    for backend, side, head, tail in lines:
        total, stock = totals[(backend, side)], totals.get((backend, "stock"))
        extra = f"{total - stock:>+7.2f}" if stock is not None else f"{'-':>7}"
        rows.append(f"{head} {total:>7.2f} {extra} {tail}")
    for backend in dict.fromkeys(s.backend for s in samples):
        single, stock = totals.get((backend, "kernel-single")), totals.get((backend, "stock"))
        if single is None or stock is None:
            continue
        runs = [s for s in samples if (s.backend, s.side) == (backend, "kernel-single") and s.cpu]
        switches = statistics.median(s.cpu.pool_switches / s.n for s in runs if s.cpu)
        verdicts = [
            _verdict(
                f"kernel-single CPU <= stock + {CPU_TARGET_MS[backend]} ms",
                single - stock <= CPU_TARGET_MS[backend],
            ),
            _verdict(f"kernel-single pool cs <= {SWITCHES_TARGET}", switches <= SWITCHES_TARGET),
        ]
        rows.append(f"{backend:<9} {'targets':<13} " + "; ".join(verdicts))
    return "\n".join(rows)


def statements_table(samples: list[Sample], top: int = 12) -> str:
    """Per (backend, side) with ``pg_stat_statements``: calls and executor µs per run of each
    statement (summed over the side's runs), most time first, and their totals."""
    rows: list[str] = []
    keys = dict.fromkeys((s.backend, s.side) for s in samples if s.statements)
    for backend, side in keys:
        runs = [s for s in samples if (s.backend, s.side) == (backend, side)]
        n = sum(s.n for s in runs)
        merged: dict[str, list[float]] = {}
        for s in runs:
            for cost in s.statements:
                calls_ms = merged.setdefault(cost.query, [0.0, 0.0])
                calls_ms[0] += cost.calls
                calls_ms[1] += cost.exec_ms
        calls = sum(c for c, _ in merged.values()) / n
        exec_us = 1000 * sum(ms for _, ms in merged.values()) / n
        rows.append(
            f"{backend} {side}: {calls:.2f} statements and {exec_us:.0f} µs executor time per run"
        )
        ranked = sorted(merged.items(), key=lambda item: -item[1][1])[:top]
        for query, (c, ms) in ranked:
            rows.append(f"  {c / n:>6.2f} calls {1000 * ms / n:>7.1f} µs  {query[:110]}")
    return "\n".join(rows)


def latency_table(latencies: dict[tuple[str, str], list[float]]) -> str:
    """p50 / p99 ms per (backend, side), and the kernel's against stock's + the targets."""
    rows = [f"{'backend':<9} {'side':<13} {'probes':>7} {'p50 ms':>7} {'p99 ms':>7}"]
    cut = {key: percentiles(values) for key, values in latencies.items()}
    for (backend, side), (p50, p99) in cut.items():
        rows.append(
            f"{backend:<9} {side:<13} {len(latencies[(backend, side)]):>7} {p50:>7.2f} {p99:>7.2f}"
        )
    for backend in dict.fromkeys(b for b, _ in latencies):
        kernel, stock = cut.get((backend, "kernel")), cut.get((backend, "stock"))
        if kernel is None or stock is None:
            continue
        (p50, p99), (stock50, stock99) = kernel, stock
        add50, add99 = LATENCY_TARGET_MS
        verdicts = [
            _verdict(f"kernel p50 <= stock + {add50:.0f} ms", p50 <= stock50 + add50),
            _verdict(f"kernel p99 <= stock + {add99:.0f} ms", p99 <= stock99 + add99),
        ]
        rows.append(f"{backend:<9} {'targets':<13} " + "; ".join(verdicts))
    return "\n".join(rows)
