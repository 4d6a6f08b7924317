"""Every state reason has a fixture chain and a rule; each chain is explained by exactly its reason,
through the pure rules, `inspect --json` and the exposition (kvoffload_state_reason, one-hot)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvoffload_exporter.bundle.texts import reasons_runbook
from kvoffload_exporter.derive.intervalreport import report
from kvoffload_exporter.derive.reasons import HINTS, NOT_STORING_RULES, RULES, CanaryFacts, explain
from kvoffload_exporter.derive.window import advance, derive, interval
from kvoffload_exporter.enums import Signal, State, StateReason
from kvoffload_exporter.expose.collector import TargetView, collect
from kvoffload_exporter.ingest.normalise import normalise
from tests.support.prom import samples

FIXTURES = Path(__file__).parent / "fixtures"
REASONS = FIXTURES / "reasons"
DP2 = FIXTURES / "reconstructed" / "native-0.33-dp2"


def _chain(reason: str, after: str = "after.prom"):  # type: ignore[no-untyped-def]
    d = REASONS / reason
    before, snap = normalise((d / "before.prom").read_text()), normalise((d / after).read_text())
    facts = d / "canary.json"
    canary = CanaryFacts(**json.loads(facts.read_text())) if facts.exists() else None
    return before, snap, canary


def _tier_bytes(reason: str) -> float | None:
    cfg = REASONS / reason / "config.json"
    return float(json.loads(cfg.read_text())["tier_bytes"]) if cfg.exists() else None


STORE_WITHOUT_LOAD_REASONS = [r for r, _ in RULES]


def test_every_reason_has_a_rule_a_hint_and_a_fixture_chain() -> None:
    for rules in (RULES, NOT_STORING_RULES):  # each state's rules are tried in StateReason order
        assert [r for r, _ in rules] == sorted((r for r, _ in rules), key=list(StateReason).index)
    assert {r for r, _ in RULES} | {r for r, _ in NOT_STORING_RULES} == set(StateReason)
    assert set(HINTS) == set(StateReason)
    assert {p.name for p in REASONS.iterdir() if p.is_dir()} == {r.value for r in StateReason}


@pytest.mark.parametrize("reason", list(StateReason))
def test_fixture_chain_is_explained_by_its_reason(reason: StateReason) -> None:
    before, after, canary = _chain(reason)
    [(key, d)] = interval(before, after).items()
    assert d.state == (State.STORE_WITHOUT_LOAD if reason in STORE_WITHOUT_LOAD_REASONS else State.NOT_STORING)
    got = explain(d, after.engine(key), after.families, canary, _tier_bytes(reason))  # type: ignore[arg-type]
    assert got == reason


def test_h200_small_tier_is_not_storing_because_the_tier_is_smaller_than_a_prefix() -> None:
    """A 300 MB tier under 5,120-token prefixes (587 MB): 12 M computed tokens in 70 s, zero stores."""
    before, after, _ = _chain("tier_smaller_than_prefix")
    p0 = advance(None, before, 0.0)
    p1 = advance(p0, after, 70.0)
    derived = derive([p0, p1], 70.0, 300.0)
    [d] = derived.values()
    assert d.deltas[Signal.PREFILL_COMPUTED_TOKENS] > 12e6 and d.deltas[Signal.OFFLOAD_STORE_BYTES] == 0
    view = TargetView("h200", "http://x", up=True, snapshot=after, derived=derived, tier_bytes=300e6)
    got = {(s.name, s.labels.get("state", s.labels.get("reason"))): s.value for s in samples(collect([view], "5m"))}
    assert got[("kvoffload_state", "not_storing")] == 1.0 and got[("kvoffload_state", "idle")] == 0.0
    assert got[("kvoffload_state_reason", "tier_smaller_than_prefix")] == 1.0
    # The tier size is what names the reason: without it the state stands unexplained.
    unknown = TargetView("h200", "http://x", up=True, snapshot=after, derived=derived)
    reasons = [s for s in samples(collect([unknown], "5m")) if s.name == "kvoffload_state_reason" and s.value]
    assert reasons == []


def test_a_gpu_hit_revisit_computes_almost_nothing_and_stays_idle() -> None:
    """Two full GPU hits of the H200 capture prefilled 52 tokens: below one chunk and MIN_PREFILL_TOKENS."""
    h200 = FIXTURES / "vllm-0.26.0-h200-native"
    base = FIXTURES / "reconstructed" / "native-0.33"
    before, after = normalise((base / "after-hit.prom").read_text()), normalise((base / "after-hit.prom").read_text())
    [d] = interval(before, after).values()
    assert d.state == State.IDLE
    cold = normalise((h200 / "0.6b_A_00_initial.prom").read_text())
    [d] = interval(cold, normalise((h200 / "0.6b_A_00_initial.prom").read_text())).values()
    assert d.state == State.IDLE


def test_degraded_hit_is_stores_dropped_and_a_clean_hit_needs_no_reason() -> None:
    before, after, _ = _chain("stores_dropped", "after-hit.prom")
    [(key, d)] = interval(before, after).items()
    assert d.state == State.HIT
    assert explain(d, after.engine(key), after.families) == StateReason.STORES_DROPPED  # type: ignore[arg-type]
    base = FIXTURES / "reconstructed" / "native-0.33"
    doc = report(normalise((base / "before.prom").read_text()), normalise((base / "after-hit.prom").read_text()))
    assert [e["state_reason"] for e in doc["engines"]] == [None]


def test_canary_facts_refine_the_counters_alone() -> None:
    """Without the canary the evicted-before-reuse chain reads as lookups that always miss."""
    before, after, canary = _chain("evicted_before_reuse")
    assert canary is not None and canary.evicted_from_tier_cycles > 0
    [(key, d)] = interval(before, after).items()
    assert explain(d, after.engine(key), after.families) == StateReason.LOOKUP_ALWAYS_MISSES  # type: ignore[arg-type]


def test_inspect_json_has_state_reason_per_engine_dp2() -> None:
    doc = report(normalise((DP2 / "after-cold.prom").read_text()), normalise((DP2 / "after-mixed.prom").read_text()))
    assert {e["engine"]: e["state_reason"] for e in doc["engines"]} == {"0": None, "1": "lookup_always_misses"}


@pytest.mark.parametrize("reason", [StateReason.TIER_SMALLER_THAN_GPU_POOL, StateReason.WARMING_UP])
def test_exposition_has_one_hot_state_reason(reason: StateReason) -> None:
    before, after, _ = _chain(reason)
    p0 = advance(None, before, 0.0)
    p1 = advance(p0, after, 60.0)
    view = TargetView("gpu0", "http://x", up=True, snapshot=after, derived=derive([p0, p1], 60.0, 60.0))
    got = [s for s in samples(collect([view], "5m")) if s.name == "kvoffload_state_reason"]
    assert len(got) == len(StateReason)
    hot = [s.labels["reason"] for s in got if s.value == 1.0]
    assert hot == [reason]
    assert all(s.labels["window"] == "5m" and s.labels["engine"] == "0" for s in got)


def test_runbook_has_a_section_per_reason() -> None:
    runbook = (Path(__file__).parent.parent / "alerts" / "runbook.md").read_text()
    assert reasons_runbook.render() in runbook
    for reason in StateReason:
        assert f"#### Reason {reason}\n" in runbook


def test_serve_canary_facts_reach_the_exported_reason() -> None:
    """The canary plugin reports its facts through the host; the next render explains with them."""
    from kvoffload_exporter.config.settings import Config, TargetConfig
    from kvoffload_exporter.server.exporter import Exporter
    from kvoffload_exporter.server.pluginhost import ExporterHost

    before, after, canary = _chain("evicted_before_reuse")
    assert canary is not None
    ticks = iter(range(0, 10**6, 10))  # every timer read 10 s later: each render merges anew
    config = Config(targets=(TargetConfig("http://127.0.0.1:9", name="a"),), host_enabled=False, gpu_enabled=False)
    exp = Exporter(config, timer=lambda: float(next(ticks)), runtime_metrics=False)
    p0 = advance(None, before, 0.0)
    p1 = advance(p0, after, 60.0)
    view = TargetView("a", "http://127.0.0.1:9", up=True, snapshot=after, derived=derive([p0, p1], 60.0, 60.0))
    exp.targets[0]._set_view(view)  # as a poll would

    def hot() -> list[str]:
        exp.render()
        got = samples(exp.body.decode())
        return [s.labels["reason"] for s in got if s.name == "kvoffload_state_reason" and s.value == 1.0]

    assert hot() == ["lookup_always_misses"]
    ExporterHost(exp).report_facts("a", canary)
    assert hot() == ["evicted_before_reuse"]


def test_tiering_backpressure_drops_cascades_not_stores() -> None:
    """Backpressure gates cascades from the primary to a secondary tier (vLLM 0.34.0 tiering/manager.py:
    1010-1015), never the GPU -> primary store: more of them never reads as `stores_dropped`, and they are
    counted per tier under kvoffload_backend_dropped_stores_total{reason="backpressure"}."""
    base = FIXTURES / "reconstructed" / "tiering-0.33"
    series = (
        'vllm:kv_offload_tiering_backpressure_stores_dropped_total{engine="0",model_name="Qwen/Qwen3-0.6B",tier="1:fs"}'
    )
    before = normalise((base / "after-cold.prom").read_text())
    text = (base / "after-store-without-load.prom").read_text()
    for name, after_text in (("unchanged", text), ("dropping", text.replace(f"{series} 16.0", f"{series} 48.0"))):
        after = normalise(after_text)
        [(key, d)] = interval(before, after).items()
        assert d.state == State.STORE_WITHOUT_LOAD
        got = explain(d, after.engine(key), after.families)  # type: ignore[arg-type]
        assert got != StateReason.STORES_DROPPED, (name, got)
        drops = {k.tier: v for k, v in d.evidence.items() if k.reason == "backpressure" and k.unit == "stores"}
        assert drops == {"1:fs": 32.0 if name == "dropping" else 0.0}  # 16 already before the window
