"""Counts and lists in the README, generated: each `<!-- gen:NAME -->…<!-- /gen -->` block is rendered from
the code that defines it (alert rules, catalogue, simulator), so the README cannot say 13 alerts when the rules
have 14. `bundle --out DIR` rewrites the blocks of DIR/README.md when it has any, and `--check` compares
them like every other generated file.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

PATH = "README.md"
_BLOCK = re.compile(r"<!-- gen:([a-z-]+) -->(.*?)<!-- /gen -->", re.S)


def _alerts() -> str:
    from kvoffload_exporter.bundle.alerting.rules import build

    records, alerts = build()
    return f"{len(records)} recording rules and {len(alerts)} alerts ({', '.join(f'`{a.alert}`' for a in alerts)})"


def _metrics() -> str:
    from kvoffload_exporter.catalogue import CATALOGUE

    return f"{len(CATALOGUE)} metric families"


def _scrape_errors() -> str:
    from kvoffload_exporter.catalogue import SCRAPE_ERROR_REASONS

    return ", ".join(f"`{r}`" for r in SCRAPE_ERROR_REASONS)


def _states() -> str:
    from kvoffload_exporter.catalogue import STATES

    return ", ".join(f"`{s}`" for s in STATES)


def _state_table() -> str:
    """Each state and its meaning, from the one definition (catalogue.STATE_MEANINGS)."""
    from kvoffload_exporter.catalogue import STATE_MEANINGS, STATES

    rows = "".join(f"| `{s}` | {STATE_MEANINGS[s]} |\n" for s in STATES)
    return f"\n| state | meaning |\n|---|---|\n{rows}"


def _faults() -> str:
    from kvoffload_exporter.sim.faults import FAULTS

    return ", ".join(f"`{f}`" for f in FAULTS)


def _backends() -> str:
    from kvoffload_exporter.sim.backends import BACKENDS

    return "|".join(BACKENDS)


def _vllm_range() -> str:
    from kvoffload_exporter.ingest.families import VLLM_RELEASES

    return " → ".join(VLLM_RELEASES)


def _read_from(rows: tuple[object, ...], signal: str) -> str:
    """The series a signal is read from: alternatives of one tier and connector joined by "or" (the first
    the scrape declares is read), separate tiers or connectors (added) by ";"."""
    from kvoffload_exporter.ingest.backends.schema import Source

    parts: dict[str, list[str]] = {}
    for r in rows:
        if isinstance(r, Source) and r.signal == signal:
            where = ", ".join(x for x in (r.tier and f"tier {r.tier}", r.connector and f"connector {r.connector}") if x)
            parts.setdefault(where, []).append(f"`{r.resolved_name}`")
    return "; ".join(" or ".join(dict.fromkeys(n)) + (f" ({w})" if w else "") for w, n in parts.items()) or "–"


def _backend_table() -> str:
    """One row per backend table (kvoffload_exporter.ingest.backends): what it reads, from its own rows."""
    from kvoffload_exporter.ingest.backends.resolve import TABLES
    from kvoffload_exporter.ingest.backends.schema import Backend, Evidence

    lines = [
        "",
        "| Backend (`backend`) | versions | stored from | loaded from | unit | dropped (`reason`) | evidence |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in sorted(TABLES, key=lambda t: list(Backend).index(t.backend)):
        moved = (Evidence.STORED, Evidence.LOADED)
        units = ", ".join(dict.fromkeys(str(r.unit) for r in t.rows if r.signal in moved))
        reasons = ", ".join(f"`{x}`" for x in dict.fromkeys(r.reason for r in t.rows if r.signal == Evidence.DROPPED))
        stored, loaded = _read_from(t.rows, Evidence.STORED), _read_from(t.rows, Evidence.LOADED)
        cells = (f"{t.title} (`{t.backend}`)", t.versions, stored, loaded, units, reasons or "–", t.evidence)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _calibrations() -> str:
    from kvoffload_exporter.sim.calibration import CALIBRATIONS, DEFAULT_CALIBRATION

    return ", ".join(f"`{c}`" + (" (the default)" if c == DEFAULT_CALIBRATION else "") for c in CALIBRATIONS)


BLOCKS: Mapping[str, Callable[[], str]] = {
    "alerts": _alerts,
    "metrics": _metrics,
    "scrape-errors": _scrape_errors,
    "states": _states,
    "state-table": _state_table,
    "sim-faults": _faults,
    "sim-backends": _backends,
    "calibrations": _calibrations,
    "vllm-range": _vllm_range,
    "backend-table": _backend_table,
}


def has_blocks(text: str) -> bool:
    return _BLOCK.search(text) is not None


def patch(text: str) -> str:
    """`text` with every generated block re-rendered (ValueError on a block name nothing renders)."""

    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in BLOCKS:
            raise ValueError(f"README.md: unknown generated block {name!r}; known: {', '.join(BLOCKS)}")
        return f"<!-- gen:{name} -->{BLOCKS[name]()}<!-- /gen -->"

    return _BLOCK.sub(one, text)
