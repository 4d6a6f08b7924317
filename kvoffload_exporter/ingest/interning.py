"""Bounded interning: one object per equal value, held once per process.

Why: thousands of targets of one vLLM version send the same label parts, bucket layouts, dropped metric
names and comment lines; each table below keeps one copy of each. A table is bounded in entries: a
hostile target inventing values only starts it over, and what it held stays valid where it is used.
"""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def held(table: dict[T, T], value: T, limit: int) -> T:
    """`value`, or the equal one `table` holds already; past `limit` entries the table starts over."""
    got = table.get(value)
    if got is None:
        if len(table) >= limit:
            table.clear()
        table[value] = got = value
    return got


_NAME_SETS: dict[frozenset[str], frozenset[str]] = {}
_MAX_NAME_SETS = 1024


def name_set(names: frozenset[str]) -> frozenset[str]:
    """One set of family names per process for equal sets: every target of one vLLM version reads the
    same families (a set of ~60 names is ~2 KiB, held by each target's snapshot and histogram shape)."""
    return held(_NAME_SETS, names, _MAX_NAME_SETS)


__all__ = ["held", "name_set"]
