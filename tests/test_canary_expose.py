"""Canary state → exposition: names and labels from the catalogue, counters pre-created."""

from __future__ import annotations

from kvoffload_exporter.canary.config import CanarySettings
from kvoffload_exporter.canary.cycle.engine import CanaryState
from kvoffload_exporter.canary.expose import render
from kvoffload_exporter.catalogue import CANARY_REASONS, CANARY_RESULTS, CATALOGUE
from kvoffload_exporter.enums import OutputPair
from kvoffload_exporter.expose.render import Exposition


def _state() -> CanaryState:
    st = CanaryState("gpu0", CanarySettings(), max_samples=50)
    for x in [0.060, 0.062, 0.064] * 4:
        st.observe("offload_hit", x)
    for x in [0.033, 0.034, 0.035] * 4:
        st.observe("control_target", x)
    st.probes["offload_hit"] += 12
    st.cycles["loaded_but_slower"] += 12
    st.tokens_spent = 1234
    st.budget_remaining = 5000.0
    st.last_success = 1.7e9
    st.residency["gpu"] = 60.0
    st.output.sense(1, [5, 6], [7, 8], [0, 2, 4, 6])
    st.output.reproduce([5, 6], [5, 6])  # the GPU hit answered alike twice: the GPU pair decides
    st.output.add(1, OutputPair.OFFLOAD_VS_GPU, [5, 6], [5, 6])
    st.recompute()
    return st


def _text(states: list[CanaryState]) -> str:
    x = Exposition()
    render(x, states)
    return x.text()


def test_exposition() -> None:
    text = _text([_state()])
    for name in [
        n
        for n in CATALOGUE
        # Residency and the per-load-band series need wait / serve cycles (tests/test_canary_bands.py).
        if n.startswith("kvoffload_canary_") and n != "kvoffload_canary_residency_seconds" and "_band" not in n
    ]:
        assert f"# TYPE {name} " in text, name
    assert 'kvoffload_canary_ttft_seconds{target="gpu0",path="offload_hit",quantile="0.5"} 0.062' in text
    assert 'kvoffload_canary_verdict{target="gpu0",verdict="offload_slower"} 1.0' in text
    assert 'kvoffload_canary_verdict{target="gpu0",verdict="inconclusive"} 0.0' in text
    assert 'kvoffload_canary_residency_seconds{target="gpu0",tier="gpu"} 60.0' in text
    assert 'tier="offload"' not in text  # unknown: absent, not 0
    for r in CANARY_RESULTS:
        assert f'kvoffload_canary_probes_total{{target="gpu0",result="{r}"}}' in text
    for r in CANARY_REASONS:
        assert f'kvoffload_canary_cycles_total{{target="gpu0",reason="{r}"}}' in text
    assert 'control="control_target",bound="lower"' in text
    assert 'kvoffload_canary_output_compared_total{target="gpu0",pair="offload_vs_gpu"} 1.0' in text
    assert 'kvoffload_canary_output_mismatches_total{target="gpu0",pair="offload_vs_recompute"} 0.0' in text
    assert 'kvoffload_canary_output_sensitive{target="gpu0"} 1.0' in text
    (line,) = [ln for ln in text.splitlines() if ln.startswith("kvoffload_canary_delta_ttft_seconds{")]
    assert abs(float(line.rsplit(" ", 1)[1]) - 0.028) < 1e-9


def test_fresh_state_is_inconclusive_without_ttft_series() -> None:
    st = CanaryState("t", CanarySettings())
    st.recompute()
    text = _text([st])
    assert "kvoffload_canary_ttft_seconds" not in text
    assert 'kvoffload_canary_verdict{target="t",verdict="inconclusive"} 1.0' in text
    assert "kvoffload_canary_budget_remaining_tokens" not in text  # set by the engine once it runs


def test_ttft_summary_count_and_sum_only_grow_past_the_rolling_window() -> None:
    """The rolling samples keep the last 50; `_count`/`_sum` count every sample (a summary's contract)."""
    st = CanaryState("gpu0", CanarySettings(), max_samples=50)
    seen = []
    for _ in range(60):
        st.observe("offload_hit", 0.05)
        line = next(ln for ln in _text([st]).splitlines() if ln.startswith("kvoffload_canary_ttft_seconds_count"))
        seen.append(float(line.rsplit(" ", 1)[1]))
    assert seen == [float(i + 1) for i in range(60)] and len(st.samples["offload_hit"]) == 50


def test_a_mismatch_makes_the_verdict_output_mismatch_whatever_the_speed() -> None:
    st = _state()
    st.output.add(2, OutputPair.OFFLOAD_VS_GPU, [5, 9], [5, 6])
    text = _text([st])
    assert 'kvoffload_canary_output_mismatches_total{target="gpu0",pair="offload_vs_gpu"} 1.0' in text
    assert 'kvoffload_canary_verdict{target="gpu0",verdict="output_mismatch"} 1.0' in text
    assert 'kvoffload_canary_verdict{target="gpu0",verdict="offload_slower"} 0.0' in text


def test_an_insensitive_model_counts_nothing_until_its_gpu_answer_is_reproduced() -> None:
    st = CanaryState("gpu0", CanarySettings(), max_samples=50)
    st.output.sense(1, [5, 6], [5, 6], [0, 2, 4, 6])
    st.output.add(1, OutputPair.OFFLOAD_VS_GPU, [5, 9], [5, 6])  # differs, but no second GPU hit yet
    text = _text([st])
    assert 'kvoffload_canary_output_sensitive{target="gpu0"} 0.0' in text
    assert 'kvoffload_canary_output_mismatches_total{target="gpu0",pair="offload_vs_gpu"} 0.0' in text
    assert 'kvoffload_canary_output_compared_total{target="gpu0",pair="offload_vs_gpu"} 0.0' in text
    assert st.output.as_dict()["result"] == "unverifiable"
    # A reproducible engine: an equal answer still proves nothing, a same-prompt difference is a mismatch.
    st.output.reproduce([5, 6], [5, 6])
    assert st.output.add(2, OutputPair.OFFLOAD_VS_GPU, [5, 6], [5, 6]).result == "unverifiable"
    assert st.output.add(3, OutputPair.OFFLOAD_VS_GPU, [5, 9], [5, 6]).result == "mismatch"


def test_a_gpu_reference_that_did_not_reproduce_never_blames_the_tier() -> None:
    st = CanaryState("gpu0", CanarySettings(), max_samples=50)
    st.output.sense(1, [5, 6], [7, 8], [0, 2, 4, 6])
    st.output.reproduce([5, 6], [5, 6])
    st.output.reproduce([5, 6], [9, 9])  # a second GPU hit answered otherwise: random ids, or drift
    assert st.output.add(2, OutputPair.OFFLOAD_VS_GPU, [5, 9], [5, 6]).result == "unverifiable"
    assert st.output.as_dict()["mismatched"] == 0
