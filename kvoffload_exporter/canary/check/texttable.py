"""Plain-text tables and millisecond cells for `check`'s report and its load-sweep section. Pure."""

from __future__ import annotations

from collections.abc import Sequence


def ms(v: float | None, sign: bool = False) -> str:
    """Seconds as milliseconds with one decimal ("-" when unknown); `sign` forces + for deltas."""
    if v is None:
        return "-"
    return f"{v * 1000:+.1f}" if sign else f"{v * 1000:.1f}"


def table(heads: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> list[str]:
    """Header, dashes and rows; a column is right-aligned where `right` says so; no trailing blanks."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(heads)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)).rstrip()

    return [line(heads), line(["-" * w for w in widths])] + [line(r) for r in rows]
