"""The committed H200 reference-run evidence (docs/gpu-reference/) stays consistent with the code, and the
model shapes of the harness (tools/gpuref/) still match it.

Replays the real vLLM 0.26.0 `/metrics` dumps of the recorded run through `normalise` (and, for the `check`
interval, through `inspect.report`) and compares with an independent prometheus_client reading, with
the exporter's own `/metrics` recorded at the end of the run, and with the `check --json` documents.
The harness itself is tested in tests/test_gpuref.py. See docs/gpu-reference-run.md.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from support.prom import Sample, offload_bytes_oracle, samples

from kvoffload_exporter.derive.intervalreport import report as interval_report
from kvoffload_exporter.ingest.normalise import normalise

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "docs" / "gpu-reference"
GPU = ROOT / "tools" / "gpuref"

# Per shape: file names as the device run wrote them, and what that run recorded.
SHAPES = {
    "0.6b": {
        "model": "Qwen/Qwen3-0.6B",
        "config": "model-0.6b",
        "check": "check.json",
        "exporter": "exporter_metrics.txt",
        "vllm_a": "vllm_A_metrics.txt",
        "vllm_b": "vllm_B_metrics.txt",
        "load_bytes": 7_141_851_136,
        "store_bytes": 33_367_785_472,
        "verdict": ("offload_slower", 1),
    },
    "32b": {
        "model": "Qwen/Qwen3-32B",
        "config": "model-32b",
        "check": "32_check_32.json",
        "exporter": "32_exporter_metrics.txt",
        "vllm_a": "32_vllm_A_metrics.txt",
        "vllm_b": "32_vllm_B_metrics.txt",
        "load_bytes": 16_324_231_168,
        "store_bytes": 76_269_223_936,
        "verdict": ("offload_faster", 0),
    },
}
TARGET, CONTROL = "127.0.0.1:8000", "127.0.0.1:8001"


def _text(shape: str, key: str) -> str:
    return (REF / shape / SHAPES[shape][key]).read_text(encoding="utf-8")


def _check(shape: str) -> dict:
    return json.loads(_text(shape, "check"))


def _exporter_samples(shape: str) -> list[Sample]:
    return samples(_text(shape, "exporter"))


def _one(found: list[Sample], name: str, **labels: str) -> float:
    hits = [s.value for s in found if s.name == name and all(s.labels.get(k) == x for k, x in labels.items())]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def _bytes_per_token(shape: str) -> int:
    cfg = json.loads((GPU / SHAPES[shape]["config"] / "config.json").read_text())
    assert cfg["torch_dtype"] == "bfloat16"
    return 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * cfg["head_dim"] * 2


@pytest.mark.parametrize("shape", SHAPES)
def test_target_dump_is_flat_and_never_doubled(shape: str) -> None:
    text = _text(shape, "vllm_a")
    snap = normalise(text)
    assert snap.generation == "flat" and snap.offload_configured and not snap.multiprocess
    (eng,) = snap.engines
    assert eng.key == (SHAPES[shape]["model"], "0")
    oracle = offload_bytes_oracle(text)
    # 0.26.0 exports both generations with equal values: the exporter takes the flat one, once.
    assert oracle["flat_load"] == oracle["legacy_load"] == SHAPES[shape]["load_bytes"]
    assert oracle["flat_store"] == oracle["legacy_store"] == SHAPES[shape]["store_bytes"]
    assert eng.counters["offload_load_bytes"] == SHAPES[shape]["load_bytes"]
    assert eng.counters["offload_store_bytes"] == SHAPES[shape]["store_bytes"]
    assert eng.counters["offload_loads"] == 12 and eng.counters["offload_stores"] == 57
    # Every loaded byte is an external-hit token's KV: hits x (2 x layers x KV heads x head_dim x 2 B).
    bpt = _bytes_per_token(shape)
    assert bpt == _check(shape)["bytes_per_token"]
    assert eng.counters["offload_load_bytes"] == eng.counters["external_prefix_hits"] * bpt
    assert eng.prompt_tokens_by_source["external_kv_transfer"] == eng.counters["external_prefix_hits"]
    assert eng.cache_config["num_gpu_blocks"] == "640" and eng.cache_config["block_size"] == "16"


@pytest.mark.parametrize("shape", SHAPES)
def test_control_dump_has_no_offload_generation(shape: str) -> None:
    text = _text(shape, "vllm_b")
    snap = normalise(text)
    assert snap.generation == "none" and not snap.offload_configured
    assert not any(f.startswith("vllm:kv_offload_") for f in snap.families)
    assert offload_bytes_oracle(text) == {"flat_load": 0.0, "flat_store": 0.0, "legacy_load": 0.0, "legacy_store": 0.0}
    (eng,) = snap.engines
    assert eng.key == (SHAPES[shape]["model"], "0")
    assert not any(k.startswith("offload_") for k in eng.counters)
    assert eng.counters["external_prefix_hits"] == 0.0
    assert eng.counters["gpu_prefix_hits"] == 5984.0  # the built-in canary's one GPU hit


@pytest.mark.parametrize("shape", SHAPES)
def test_exporter_dump_matches_the_replayed_vllm_dumps(shape: str) -> None:
    found = _exporter_samples(shape)
    (eng,) = normalise(_text(shape, "vllm_a")).engines
    lab = {"target": TARGET, "model_name": SHAPES[shape]["model"], "engine": "0"}
    assert _one(found, "kvoffload_offload_load_bytes_total", **lab) == eng.counters["offload_load_bytes"]
    assert _one(found, "kvoffload_offload_store_bytes_total", **lab) == eng.counters["offload_store_bytes"]
    assert _one(found, "kvoffload_target_info", target=TARGET, generation="flat") == 1.0
    assert _one(found, "kvoffload_target_info", target=CONTROL, generation="none") == 1.0
    assert _one(found, "kvoffload_state", target=TARGET, state="hit") == 1.0
    assert _one(found, "kvoffload_state", target=CONTROL, state="not_configured") == 1.0
    # The control target has no offload byte series at all (absent, not 0).
    assert not [n for n, lab_, _ in found if n.startswith("kvoffload_offload_") and lab_.get("target") == CONTROL]


@pytest.mark.parametrize("shape", SHAPES)
def test_check_interval_replays_from_the_recorded_snapshots(shape: str) -> None:
    def snap(which: str):
        with gzip.open(REF / shape / f"target_metrics_{which}.prom.gz", "rt", encoding="utf-8") as f:
            return normalise(f.read())

    doc = _check(shape)
    now = interval_report(snap("before"), snap("after"))
    # Keys added to the report after the run was recorded (e.g. ttft_count, the evidence schema's
    # backends/sources/evidence) are not in the recording.
    for k in set(now) - set(doc["interval"]):
        del now[k]
    for e, rec in zip(now["engines"], doc["interval"]["engines"]):
        assert e["state_reason"] is None  # a hit needs no explaining
        for k in set(e) - set(rec):
            del e[k]
    assert now == doc["interval"]
    (row,) = doc["interval"]["engines"]
    sizing = doc["conditions"]["sizing"]
    prefix_bytes = sizing["prefix_tokens"] * doc["bytes_per_token"]
    # 10 offload revisits + 1 recompute probe (max_load_tokens ignored by 0.26.0) loaded the prefix;
    # 10 seeds + 1 seed_b + 30 fillers + 10 cold probes stored one prefix-sized prompt each.
    assert row["offload_load_bytes"] == 11 * prefix_bytes
    assert row["offload_store_bytes"] == 51 * prefix_bytes
    assert row["state"] == "hit"


@pytest.mark.parametrize("shape", SHAPES)
def test_check_document_verdict_and_phase_deltas(shape: str) -> None:
    doc = _check(shape)
    assert (doc["verdict"], doc["exit_code"]) == SHAPES[shape]["verdict"]
    assert doc["conditions"]["target"]["generation"] == "flat"
    assert doc["conditions"]["control"]["generation"] == "none"
    sizing = doc["conditions"]["sizing"]
    assert (sizing["prefix_tokens"], sizing["tail_tokens"]) == (5120, 8)
    prefix_bytes = sizing["prefix_tokens"] * doc["bytes_per_token"]
    phases = {p["phase"]: p for p in doc["phase_summary"]}
    assert phases["offload_revisit"]["classifications"] == {"offload_hit": 10}
    assert phases["offload_revisit"]["load_bytes"] == prefix_bytes
    assert phases["offload_revisit"]["external_hit_tokens"] == sizing["prefix_tokens"]
    assert phases["gpu_revisit"]["gpu_hit_tokens"] == sizing["prefix_tokens"]
    assert phases["seed"]["store_bytes"] == prefix_bytes
    assert phases["control_target"]["load_bytes"] == phases["control_target"]["store_bytes"] == 0.0
    med = doc["ttft_seconds"]
    assert doc["delta_ttft_seconds"] == pytest.approx(
        med["offload_hit"]["median"] - med["control_target"]["median"], abs=1e-6
    )
    lo, hi = doc["delta_ttft_ci_seconds"]
    assert lo <= doc["delta_ttft_seconds"] <= hi
    assert (hi < 0) if doc["verdict"] == "offload_faster" else (lo > 0)
