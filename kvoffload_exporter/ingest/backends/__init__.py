"""Per-backend family tables mapped onto one evidence schema (see docs/backends.md).

One small module per backend holds a declarative table (`BackendTable`); `resolve` picks the
backends a scrape shows and folds their samples into `EvidenceKey` series. Pure: no I/O.
"""

from __future__ import annotations

from kvoffload_exporter.ingest.backends.resolve import (
    FAMILIES,
    HISTOGRAMS,
    Origins,
    RawSample,
    SourceRef,
    detect,
    resolve,
    rows_for,
    sources,
)
from kvoffload_exporter.ingest.backends.schema import Backend, DropReason, Evidence, EvidenceKey, NativeUnit, Source

__all__ = [
    "FAMILIES",
    "HISTOGRAMS",
    "Backend",
    "DropReason",
    "Evidence",
    "EvidenceKey",
    "NativeUnit",
    "Origins",
    "RawSample",
    "Source",
    "SourceRef",
    "detect",
    "resolve",
    "rows_for",
    "sources",
]
