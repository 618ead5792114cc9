"""Plain-text tables for the benchmark output."""

from __future__ import annotations

from collections.abc import Sequence


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], title: str = "") -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [title] if title else []
    for n, row in enumerate(cells):
        # First column left-aligned (names), the numbers right-aligned.
        padded = (
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        lines.append("  ".join(padded).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def pct(value: float, digits: int = 2) -> str:
    return f"{100 * value:.{digits}f}%"


def ratio(value: float, base: float) -> str:
    return f"{value / base:.4f}" if base else "-"
