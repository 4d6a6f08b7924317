"""The committed H200 reference-run evidence (docs/gpu-reference/) stays consistent with the code, and the
harness that made it (tools/gpu/) still describes that run and still runs.

Replays the real vLLM 0.26.0 `/metrics` dumps of that run through `normalise` (and, for the `check`
interval, through `inspect.report`) and compares with an independent prometheus_client reading, with
the exporter's own `/metrics` recorded at the end of the run, and with the `check --json` documents.
The run spec must reproduce the recorded command lines, and the supervisor is rehearsed against the
product's simulator. See docs/gpu-reference-run.md for what each file is.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from support.prom import Sample, offload_bytes_oracle, samples

from exporter.commands.inspect import report as interval_report
from exporter.normalise import normalise

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "docs" / "gpu-reference"
GPU = ROOT / "tools" / "gpu"

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


# ---- the harness: tools/gpu/spec.py describes the recorded run, supervisor.py runs it ------------------


def _spec() -> ModuleType:
    loader = importlib.util.spec_from_file_location("gpu_spec", GPU / "spec.py")
    assert loader and loader.loader
    mod = importlib.util.module_from_spec(loader)
    sys.modules["gpu_spec"] = mod  # dataclasses resolve their module by name
    loader.loader.exec_module(mod)
    return mod


def _recorded(shape: str) -> dict:
    return json.loads((REF / shape / "summary.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("shape", SHAPES)
def test_spec_reproduces_the_recorded_vllm_command_lines(shape: str) -> None:
    spec = _spec()
    run = spec.run_spec(shape)
    recorded = _recorded(shape)["servers"]
    prefix = "32" if shape == "32b" else ""  # the device run tagged the 32B servers 32A, 32B
    for server in run.servers:
        argv = spec.vllm_argv("python3", run, server)
        want = shlex.split(recorded[prefix + server.phase]["cmd"])
        # The model directory was the device's copy of the then bench/gpu/; only that path differs.
        assert Path(want[4]).name == Path(argv[4]).name == SHAPES[shape]["config"]
        assert argv[:4] + argv[5:] == want[:4] + want[5:], server.phase


def test_spec_reproduces_the_recorded_exporter_invocations() -> None:
    spec = _spec()
    run = spec.run_spec("0.6b")
    recorded = _recorded("0.6b")
    assert spec.exporter_argv("python3", run.serve_args, run) == shlex.split(recorded["exporter"]["serve_main"])
    check = spec.exporter_argv("python3", run.check_args, run, json="J", evidence="E", secret="S")
    want = shlex.split(recorded["checks"]["main"]["argv"])
    # Today's template adds --secret-file (the rehearsal must not write to the user's state directory).
    assert check[: check.index("--json")] == want[: want.index("--json")]
    assert check[check.index("--json") :] == ["--json", "J", "--out", "E", "--secret-file", "S"]


def test_spec_import_has_no_side_effects(tmp_path: Path) -> None:
    # As `python tools/gpu/X.py` would see it (its folder first on sys.path), but not run as __main__.
    code = "import os, runpy, sys; sys.path.insert(0, os.path.dirname(sys.argv[1])); runpy.run_path(sys.argv[1])"
    for name in ("spec.py", "supervisor.py"):
        r = subprocess.run(
            [sys.executable, "-c", code, str(GPU / name)], cwd=tmp_path, capture_output=True, text=True, check=False
        )
        assert r.returncode == 0 and not r.stdout and not r.stderr, (name, r.stdout, r.stderr)
        assert not list(tmp_path.iterdir()), name


def test_rehearsal_against_the_simulator(tmp_path: Path, free_port: Callable[[], int]) -> None:
    """The whole supervised sequence with `kvoffload-exporter simulate` standing in for both vLLM servers."""
    out = tmp_path / "run"
    ports = [str(free_port()) for _ in range(3)]
    argv = [sys.executable, str(GPU / "supervisor.py"), "--backend", "sim", "--out", str(out), "--rounds", "2"]
    argv += ["--ports", *ports, "--time-scale", "0.05", "--settle", "0.1"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=240, check=False)
    assert r.returncode in (0, 1, 4), r.stdout + r.stderr  # a verdict (4: inconclusive), whichever it is
    doc = json.loads((out / "check.json").read_text(encoding="utf-8"))
    assert doc["exit_code"] == r.returncode
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    canary = {phase: {s["step"]: s for s in steps} for phase, steps in summary["canary"].items()}
    assert all(s["ok"] for steps in canary.values() for s in steps.values())
    hit = canary["A"]["P_evicted"]["delta"]  # the CPU-tier hit on A, a recompute on B
    assert hit["external_prefix_hits"] == 5952 and hit["offload_load_bytes"] == 5952 * 114_688
    assert "offload_load_bytes" not in canary["B"]["P_evicted"]["delta"]
    text = (out / "exporter_metrics.txt").read_text(encoding="utf-8")
    a, b = (f"127.0.0.1:{p}" for p in ports[:2])
    assert _one(samples(text), "kvoffload_state", target=a, state="hit") == 1.0
    assert _one(samples(text), "kvoffload_state", target=b, state="not_configured") == 1.0
    for name in ("vllm_A_metrics.txt", "vllm_B_metrics.txt", "target_metrics_before.prom", "target_metrics_after.prom"):
        assert (out / name).stat().st_size > 0, name
