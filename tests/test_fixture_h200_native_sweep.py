"""The 2026-12-01 H200 captures (vLLM 0.26.0, native OffloadingConnector, 0.6B and 14B shapes).

Replays the real `/metrics` chain (initial → prefix stored → displaced → loaded back) through the
exporter's interval report and checks it against an independent prometheus_client reading and the KV
geometry of each shape; checks that the concurrency-sweep records prove what the doc claims (one tier
load per burst, the other revisits GPU hits), and that the committed analysis is reproducible from the
raw requests. Background: tests/fixtures/vllm-0.26.0-h200-native/README.md.
"""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import pytest
from conftest import FIXTURES, offload_bytes_oracle

from kvoffload_exporter.derive.intervalreport import report as interval_report
from kvoffload_exporter.ingest.normalise import normalise

DIR = FIXTURES / "vllm-0.26.0-h200-native"
GPUREF = Path(__file__).resolve().parents[1] / "tools" / "gpuref"
# KV bytes per token = 2 (K, V) x layers x KV heads x head_dim x 2 B (bf16); 64-token offload chunks.
SHAPES = {
    "0.6b": {"model": "Qwen/Qwen3-0.6B", "bytes_per_token": 2 * 28 * 8 * 128 * 2},
    "14b": {"model": "Qwen/Qwen3-14B", "bytes_per_token": 2 * 40 * 8 * 128 * 2},
}
STEPS = ("00_initial", "01_after_store", "02_after_displace", "03_after_load")
SWEEPS = ("sweep_0.6b_c1-8-32.jsonl.gz", "sweep_0.6b_c2-4-16.jsonl.gz", "sweep_14b_c1-8-32.jsonl.gz")


def _interval(shape: str, server: str, a: str, b: str) -> dict:  # type: ignore[type-arg]
    before = (DIR / f"{shape}_{server}_{a}.prom").read_text(encoding="utf-8")
    after = (DIR / f"{shape}_{server}_{b}.prom").read_text(encoding="utf-8")
    (engine,) = interval_report(normalise(before), normalise(after))["engines"]
    return engine  # type: ignore[no-any-return]


def _oracle_delta(shape: str, a: str, b: str) -> dict[str, float]:
    x = offload_bytes_oracle((DIR / f"{shape}_A_{a}.prom").read_text(encoding="utf-8"))
    y = offload_bytes_oracle((DIR / f"{shape}_A_{b}.prom").read_text(encoding="utf-8"))
    return {k: y[k] - x[k] for k in x}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_store_step_stores_the_6000_token_prefix_and_loads_nothing(shape: str) -> None:
    e = _interval(shape, "A", "00_initial", "01_after_store")
    chunk_bytes = 64 * SHAPES[shape]["bytes_per_token"]
    assert e["model_name"] == SHAPES[shape]["model"]
    assert e["offload_store_bytes"] == 93 * chunk_bytes  # 6000 tokens -> 93 full 64-token chunks
    assert e["offload_load_bytes"] == 0 and e["state"] == "storing"
    assert _oracle_delta(shape, "00_initial", "01_after_store")["flat_store"] == e["offload_store_bytes"]


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_revisit_after_displacement_loads_the_prefix_back_from_the_cpu_tier(shape: str) -> None:
    e = _interval(shape, "A", "02_after_displace", "03_after_load")
    assert e["state"] == "hit"
    assert e["offload_load_bytes"] == 5952 * SHAPES[shape]["bytes_per_token"] and e["offload_store_bytes"] == 0
    assert e["external_prefix_hits"] == 5952 and e["gpu_prefix_hits"] == 0
    assert _oracle_delta(shape, "02_after_displace", "03_after_load")["flat_load"] == e["offload_load_bytes"]


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_control_server_without_connector_is_not_configured_on_every_step(shape: str) -> None:
    for a, b in itertools.pairwise(STEPS):
        e = _interval(shape, "B", a, b)
        assert e["state"] == "not_configured", (a, b)
        assert not e["offload_load_bytes"] and e["external_prefix_hits"] == 0


def _rows(name: str) -> list[dict]:  # type: ignore[type-arg]
    with gzip.open(DIR / name, "rt", encoding="utf-8") as f:
        return [json.loads(x) for x in f if x.strip()]


@pytest.mark.parametrize("name", SWEEPS)
def test_every_offload_burst_loaded_the_shared_prefix_exactly_once(name: str) -> None:
    rows = _rows(name)
    shape = rows[0]["server"].rsplit("_", 1)[0]
    prefix_bytes = 5120 * SHAPES[shape]["bytes_per_token"]
    for r in rows:
        ok = [q for q in r["requests"] if q.get("ok")]
        assert len(ok) == r["level"], (r["level"], r["round"], r["path"])
        d = r["metrics_delta"]
        if r["path"] == "offload":
            assert d["kv_offload_load_bytes_total"] == prefix_bytes
            assert d["external_prefix_cache_hits_total"] == 5120
            assert d.get("prefix_cache_hits_total", 0) == (r["level"] - 1) * 5120  # the rest hit the GPU
            assert all(q["cached_tokens"] == 5120 for q in ok)
        else:
            assert "kv_offload_load_bytes_total" not in d
            assert sorted(q["cached_tokens"] for q in ok) == [0] + [5120] * (r["level"] - 1)


@pytest.mark.parametrize("name", SWEEPS)
def test_sweep_has_at_least_ten_bursts_per_path_per_level(name: str) -> None:
    rows = _rows(name)
    for level in {r["level"] for r in rows}:
        for path in ("offload", "control"):
            assert sum(1 for r in rows if r["level"] == level and r["path"] == path) >= 10, (level, path)


def test_committed_sweep_analysis_is_reproduced_by_the_pooled_median_bootstrap() -> None:
    """The harness of the day (5,000 replicates, its own generator) and the same method today (the pooled-median
    bootstrap that `check` used then, stats.pooled_bootstrap) over the same bursts: the same point estimate,
    interval ends within a tenth of the interval's width. `check` itself now decides with the rank-sum
    method (docs/canary.md)."""
    from kvoffload_exporter.canary.cycle.stats import median, pooled_bootstrap

    committed = json.loads((DIR / "sweep_analysis.json").read_text(encoding="utf-8"))
    assert sorted(committed) == sorted(SWEEPS)
    for name in SWEEPS:
        rows = _rows(name)
        for want in committed[name]["levels"]:
            c = want["concurrency"]
            a, b = (
                [
                    sorted(q["ttft_ms"] / 1e3 for q in r["requests"] if q.get("ok"))
                    for r in rows
                    if (r["level"], r["path"]) == (c, path)
                ]
                for path in ("offload", "control")
            )
            assert (len(a), len(b)) == tuple(want["bursts"])
            delta = median([x for y in a for x in y]) - median([x for y in b for x in y])
            assert delta * 1e3 == pytest.approx(want["delta_ttft_ms"], abs=2e-3)
            low, high = pooled_bootstrap(a, b, 0.5, 0.95, 2000, 0)
            width = want["ci95_ms"][1] - want["ci95_ms"][0]
            assert [low * 1e3, high * 1e3] == pytest.approx(want["ci95_ms"], abs=0.1 * width), (name, c)
