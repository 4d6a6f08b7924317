"""Shared test helpers: fixture paths and reading captures."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_text(rel: str) -> str:
    return (FIXTURES / rel).read_text(encoding="utf-8")


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


def offload_bytes_oracle(text: str) -> dict[str, float]:
    """Independent reading with prometheus_client: flat offload bytes per direction, and the legacy
    transfer_type mirror, so tests can prove the exporter uses one generation and never both."""
    out = {"flat_load": 0.0, "flat_store": 0.0, "legacy_load": 0.0, "legacy_store": 0.0}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "vllm:kv_offload_load_bytes_total":
                out["flat_load"] += s.value
            elif s.name == "vllm:kv_offload_store_bytes_total":
                out["flat_store"] += s.value
            elif s.name == "vllm:kv_offload_total_bytes_total":
                key = "legacy_load" if s.labels["transfer_type"] == "CPU_to_GPU" else "legacy_store"
                out[key] += s.value
    return out
