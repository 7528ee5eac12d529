"""A checker's rows for people: the table, each injection's observations, the violations."""

from __future__ import annotations

from collections.abc import Sequence

from multihost.checker import INFO, VIOLATIONS, Row

__all__ = ["failed", "report", "table"]


def failed(rows: Sequence[Row]) -> bool:
    """Whether any violation column is non-zero in any row."""
    return any(row.counts[column] for row in rows for column in VIOLATIONS)


def table(rows: Sequence[Row]) -> str:
    """The figures, one line per fault, as a fixed-width table."""
    header = ("fault", "injected", "expected", "skipped", *VIOLATIONS, *INFO, "recovery_s")
    body = [
        (
            row.fault,
            *(str(n) for n in (row.injected, row.expected, row.skipped)),
            *(str(row.counts[c]) for c in (*VIOLATIONS, *INFO)),
            f"{row.recovery_s:.1f}",
        )
        for row in rows
    ]
    widths = [max(len(r[i]) for r in (header, *body)) for i in range(len(header))]
    return "\n".join(
        "  ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        )
        for line in (header, *body)
    )


def report(rows: Sequence[Row], *, verbose: bool = False) -> str:
    """Each injection (what was injected; what was observed), skip reasons, the
    violations (every note when ``verbose``), then the table."""
    out: list[str] = []
    for row in rows:
        out += [f"{row.fault}: {seen}" for seen in row.observed]
        if row.skip_reasons:
            reasons = ", ".join(f"{n} {why}" for why, n in row.skip_reasons.most_common())
            out.append(f"{row.fault}: skipped {reasons}")
        out += [
            f"  {row.fault}: {note}"
            for note in row.notes
            if verbose or note.split(":", 1)[0] in VIOLATIONS
        ]
    return "\n".join([*out, table(rows)])
