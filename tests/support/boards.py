"""Grafana dashboards as tests read them: every panel, rows' panels included."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def panels(node: Any) -> Iterator[dict[str, Any]]:
    """Every panel of a dashboard (or of a row), depth first."""
    for p in node.get("panels", []):
        yield p
        yield from panels(p)
