"""`kvoffload-exporter check` against real vLLM 0.32: every canary phase is classified as the engine's own
counters say, and the bytes the check reports are the bytes vLLM counted.

Only counters are asserted, never TTFTs or the verdict on the offload server (CPU timings are not
realistic). Sizes: a 2048-token prefix (16 blocks of 128) + 8 tail tokens, so every full hit is exactly
2048 tokens and every store or load of the prefix is 16 x 128 x 1 KiB = 2,097,152 B; the 8,192-token
engine cache gives ceil(1.5 x 8192 / 2056) = 6 fillers per round.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import client
from .vllm_server import BLOCK_TOKENS, KV_BYTES_PER_TOKEN, OFFLOAD_KV_BYTES, VllmServer, make_tiny_model, venv_problem

ROOT = Path(__file__).resolve().parents[2]
PREFIX = 2048
TAIL = 8  # the canary's tail: min(8, block / 2), shorter than one block
PREFIX_BYTES = PREFIX // BLOCK_TOKENS * BLOCK_TOKENS * KV_BYTES_PER_TOKEN  # 2,097,152
FILLERS = 6
FILLER_BYTES = (PREFIX + TAIL) // BLOCK_TOKENS * BLOCK_TOKENS * KV_BYTES_PER_TOKEN  # 16 full blocks each
ROUNDS = 5  # = --min-samples: the rounds stop once 5 samples a path are counted
PLAIN_ROUNDS = 3  # `no_offload_hit` needs at least three displaced revisits

LOAD = "vllm:kv_offload_load_bytes_total"
STORE = "vllm:kv_offload_store_bytes_total"
GPU_HITS = "vllm:prefix_cache_hits_total"
EXT_HITS = "vllm:external_prefix_cache_hits_total"

PRESSURE_PHASES = ["seed", "gpu_revisit", "seed_b", "displace", "offload_revisit", "recompute", "cold"]

pytestmark = pytest.mark.e2e


def run_check(target: str, tmp: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict, Path]:
    out = tmp / "evidence"
    report = tmp / "check.json"
    args = [
        sys.executable,
        "-m",
        "kvoffload_exporter",
        "check",
        "--target",
        target,
        "--allow-pressure",
        "--prefix-tokens",
        str(PREFIX),
        "--chunk-tokens",
        str(BLOCK_TOKENS),
        "--min-samples",
        "5",
        "--json",
        str(report),
        "--out",
        str(out),
        "--secret-file",
        str(tmp / "canary-secret"),
        *extra,
    ]  # never touch ~/.local/state
    # A deadline against hangs only (~20 s normally); a busy CI box may be several times slower.
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=420, check=False)
    assert report.is_file(), f"no JSON report (exit {done.returncode})\n{done.stdout}\n{done.stderr}"
    return done, json.loads(report.read_text()), out


def by_cycle(doc: dict) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for p in doc["phases"]:
        out.setdefault(p["cycle"], []).append(p)
    return out


def raw_delta(before: str, after: str, name: str, **labels: str) -> float:
    return client.total(after, name, **labels) - client.total(before, name, **labels)


@pytest.fixture(scope="module")
def plain_small(vllm_servers: dict[str, VllmServer], tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """A server without a KV connector and with the offload server's 8,192-token engine cache, started but
    not awaited (it boots while the offload check runs; the plain-check test waits for it).

    The session's `vllm_plain` has a 262,144-token cache: `check`'s fillers (1.5 x the GPU cache) would cost
    ~393k prompt tokens a round, ~35 s a round on 2 cores, and `no_offload_hit` needs three rounds. The
    repeated `--kv-cache-memory-bytes` wins over the one in VllmServer.command() (argparse: last one)."""
    server = VllmServer(
        "plain-small",
        offload=False,
        extra_args=("--kv-cache-memory-bytes", OFFLOAD_KV_BYTES),
        log_dir=tmp_path_factory.mktemp("vllm-plain-small"),
        model_dir=vllm_servers["plain"].model_dir,
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_check_phases_match_the_engine_counters(
    vllm_offload: VllmServer, plain_small: VllmServer, tmp_path: Path
) -> None:
    url = vllm_offload.url
    client.settle(url)  # earlier tests' stores surface before the baseline
    before = client.metrics(url)
    done, doc, out = run_check(url, tmp_path, "--rounds", str(ROUNDS))
    client.settle(url)  # a 4-token request: moves no bytes or hit tokens itself
    after = client.metrics(url)
    why = f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"

    # The verdict does not matter (CPU timings), only that the procedure completed every round.
    assert done.returncode == doc["exit_code"] and doc["verdict"] != "error", why
    assert (doc["rounds_completed"], doc["rounds_failed"]) == (ROUNDS, 0), why
    cond = doc["conditions"]
    assert cond["target"]["generation"] == "flat" and cond["target"]["version"] == "0.32.0"
    assert cond["gpu_cache_tokens"] == 8192
    sz = cond["sizing"]
    assert (sz["prefix_tokens"], sz["tail_tokens"], sz["block_size"], sz["align"]) == (PREFIX, TAIL, 128, 128)
    assert (sz["filler_count"], sz["filler_tokens"]) == (FILLERS, PREFIX + TAIL)
    assert doc["recompute_control"] == "honoured", why  # 0.32 honours max_load_tokens: 0
    assert doc["bytes_per_token"] == KV_BYTES_PER_TOKEN  # learned from the seeds' store bytes

    # Per phase: (classification, cached tokens, load B, store B, GPU hit tokens, external hit tokens).
    expected = {
        "seed": ("miss", 0, 0, PREFIX_BYTES, 0, 0),  # cold: the prefix's 16 blocks are stored
        "gpu_revisit": ("gpu_hit", PREFIX, 0, 0, PREFIX, 0),
        "seed_b": ("miss", 0, 0, PREFIX_BYTES, 0, 0),
        "displace": (None, None, 0, FILLERS * FILLER_BYTES, 0, 0),
        "offload_revisit": ("offload_hit", PREFIX, PREFIX_BYTES, 0, 0, PREFIX),  # loaded back from the tier
        "recompute": ("miss", 0, 0, 0, 0, 0),  # max_load_tokens 0: recomputed, nothing loaded (B is stored)
        "cold": ("miss", 0, 0, PREFIX_BYTES, 0, 0),  # fresh salt: new block hashes, stored again
        # The output check's one probe a run (round 1): A with eight tokens changed, fresh salt, stored.
        "sensitivity": ("miss", 0, 0, PREFIX_BYTES, 0, 0),
    }
    cycles = by_cycle(doc)
    assert sorted(cycles) == list(range(1, ROUNDS + 1))
    orders = {c["cycle"]: c["order"] for c in doc["cycles"]}  # balanced over rounds, seeded, recorded
    assert [p["cycle"] for p in doc["phases"] if p["phase"] == "sensitivity"] == [1]
    for c, phases in cycles.items():
        names = [p["phase"] for p in phases if p["phase"] != "sensitivity"]
        assert names[:4] == PRESSURE_PHASES[:4] and sorted(names[4:]) == sorted(PRESSURE_PHASES[4:]), c
        assert names[4:] == orders[c], (c, names)
        for p in phases:
            got = (
                p["classification"],
                p["cached_tokens"],
                p["load_bytes"],
                p["store_bytes"],
                p["gpu_hit_tokens"],
                p["external_hit_tokens"],
            )
            assert got == expected[p["phase"]], f"cycle {c} {p['phase']}: {p}"
            assert not p["ambiguous"] and p["other_traffic_tokens"] == 0, p
    assert [(c["result"], c["reason"] in ("ok", "loaded_but_slower")) for c in doc["cycles"]] == [
        ("offload_hit", True)
    ] * ROUNDS
    assert doc["offload_attempts"] == ROUNDS

    # The requests behind it: the recompute probes really carried max_load_tokens 0, and the server's
    # usage agrees with the classification.
    requests = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    probes = {(r["cycle"], r["phase"]): r for r in requests if r["kind"] == "probe"}
    for c in cycles:
        assert probes[(c, "recompute")]["kv_transfer_params"] == {"max_load_tokens": 0}
        assert probes[(c, "cold")]["salt"] == "fresh" and probes[(c, "seed")]["salt"] == "family"
        assert probes[(c, "offload_revisit")]["usage"]["prompt_tokens_details"]["cached_tokens"] == PREFIX
    assert all(r["status"] == 200 for r in requests)

    # The check's numbers are the engine's own: its phase windows tile the run (each "before" is the
    # previous phase's "after", or a fresh scrape with no traffic in between), so their sums equal the
    # raw counter deltas scraped here around the whole run, and the evidence snapshots (read with the
    # independent parser in client.py) bracket exactly the same movement.
    ev_before = (out / "target_metrics_before.prom").read_text()
    ev_after = (out / "target_metrics_after.prom").read_text()
    [engine] = doc["interval"]["engines"]
    for name, key, reported in (
        (LOAD, "load_bytes", engine["offload_load_bytes"]),
        (STORE, "store_bytes", engine["offload_store_bytes"]),
        (GPU_HITS, "gpu_hit_tokens", engine["gpu_prefix_hits"]),
        (EXT_HITS, "external_hit_tokens", engine["external_prefix_hits"]),
    ):
        raw = raw_delta(before, after, name)
        assert sum(p[key] for p in doc["phases"]) == raw, name
        assert raw_delta(ev_before, ev_after, name) == raw == reported, name
    assert raw_delta(before, after, LOAD) == ROUNDS * PREFIX_BYTES
    assert raw_delta(before, after, STORE) == ROUNDS * (3 * PREFIX_BYTES + FILLERS * FILLER_BYTES) + PREFIX_BYTES
    # The deprecated per-direction mirror moved by the same bytes.
    legacy = "vllm:kv_offload_total_bytes_total"
    assert raw_delta(before, after, legacy, transfer_type="CPU_to_GPU") == ROUNDS * PREFIX_BYTES
    assert raw_delta(before, after, legacy, transfer_type="GPU_to_CPU") == raw_delta(before, after, STORE)


def test_check_without_connector_finds_no_offload_hit(plain_small: VllmServer, tmp_path: Path) -> None:
    url = plain_small.wait_ready().url
    (tmp_path / "fast").mkdir()
    fast, doc, _ = run_check(url, tmp_path / "fast", "--rounds", str(PLAIN_ROUNDS))
    assert fast.returncode == 3 and doc["verdict"] == "error" and fast.stdout == "", fast.stderr
    assert "no offload connector" in fast.stderr and doc["tokens_spent"] in (None, 0)  # refused before probing
    done, doc, out = run_check(
        url, tmp_path, "--rounds", str(PLAIN_ROUNDS), "--no-recompute-control", "--allow-no-offload"
    )  # meaningless without a connector
    why = f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"

    # No connector at all: a configuration failure, named with the exporter's state and the fix (exit 3).
    assert (done.returncode, doc["exit_code"], doc["verdict"]) == (3, 3, "no_offload_hit"), why
    assert doc["advice"]["action"] == "check_connector" and "not_configured" in doc["advice"]["why"]
    assert doc["why"] == f"0 offload hits in {PLAIN_ROUNDS} displaced revisits"
    assert doc["offload_attempts"] == PLAIN_ROUNDS
    # No connector: no offload families, so nothing is ever stored and every cycle ends with `no_store`.
    assert doc["conditions"]["target"]["generation"] == "none"
    assert doc["conditions"]["target"]["offload_config"] == {}
    assert doc["reasons"] == {"no_store": PLAIN_ROUNDS}
    assert [c["result"] for c in doc["cycles"]] == ["miss"] * PLAIN_ROUNDS
    assert "offload metrics: none" in done.stdout and "no_store" in done.stdout
    orders = {c["cycle"]: c["order"] for c in doc["cycles"]}  # balanced and seeded, recorded per round
    for c, phases in by_cycle(doc).items():
        probes = orders[c]
        assert [p["phase"] for p in phases] == ["seed", "gpu_revisit", "displace", *probes], c
        for p in phases:
            assert (p["load_bytes"], p["store_bytes"], p["external_hit_tokens"]) == (0, 0, 0), p
        got = {p["phase"]: (p["classification"], p["cached_tokens"], p["gpu_hit_tokens"]) for p in phases}
        assert got == {
            "seed": ("miss", 0, 0),
            "gpu_revisit": ("gpu_hit", PREFIX, PREFIX),
            "displace": (None, None, 0),  # the fillers evicted the prefix from the GPU
            "offload_revisit": ("miss", 0, 0),
            "cold": ("miss", 0, 0),
        }, c
    ev_before = (out / "target_metrics_before.prom").read_text()
    ev_after = (out / "target_metrics_after.prom").read_text()
    for text in (ev_before, ev_after):
        assert not [f for f in client.families(text) if f.startswith("vllm:kv_offload_")]
    assert (
        sum(p["gpu_hit_tokens"] for p in doc["phases"])
        == raw_delta(ev_before, ev_after, GPU_HITS)
        == PLAIN_ROUNDS * PREFIX
    )


@pytest.fixture(scope="module")
def offload_alone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """An offload server of its own (not the session pair): the load sweep runs with one server on 2 cores."""
    problem = venv_problem()
    if problem:
        pytest.skip(problem)
    log_dir = tmp_path_factory.mktemp("vllm-sweep")
    server = VllmServer("offload-sweep", offload=True, log_dir=log_dir, model_dir=make_tiny_model(log_dir / "tiny"))
    with server:  # starts it and waits until it serves
        yield server


def test_check_load_sweep_on_vllm_0_32(offload_alone: VllmServer, tmp_path: Path) -> None:
    """`--concurrency 1,2`: bursts of concurrent revisits vs the in-band control (0.32 honours
    max_load_tokens: 0), every burst judged from the engine's counters. Timings are not asserted."""
    done, doc, out = run_check(
        offload_alone.url, tmp_path, "--rounds", "1", "--concurrency", "1,2", "--min-bursts", "5"
    )
    why = f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"
    assert doc["verdict"] != "error" and doc["recompute_control"] == "honoured", why
    sweep = doc["load_sweep"]
    assert [e["concurrency"] for e in sweep] == [1, 2], why
    for e in sweep:
        assert e["control"] == "recompute" and e["prefix_tokens"] == PREFIX, why
        assert e["bursts_offload"] >= 5 and e["bursts_control"] >= 5 and e["rounds"] >= 5, why
        assert e["n_offload"] == e["concurrency"] * e["bursts_offload"], why
        assert e["delta_ttft_seconds"] is not None and e["verdict"] in (
            "offload_faster",
            "offload_slower",
            "inconclusive",
        ), why
    requests = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    offload = [r for r in requests if r["phase"] == "sweep_offload" and r["kind"] == "burst"]
    control = [r for r in requests if r["phase"] == "sweep_control" and r["kind"] == "burst"]
    assert offload and all(r["cached_tokens"] == PREFIX for r in offload), why  # every revisit a full hit
    assert control and all(r["kv_transfer_params"] == {"max_load_tokens": 0} for r in control), why
    assert "crossover (2,048-token prefix):" in done.stdout and done.stdout.count("advice: ") == 1, why
    assert doc["advice"]["action"] in ("keep", "disable_loads", "skip_loads_below", "measure_longer"), why
