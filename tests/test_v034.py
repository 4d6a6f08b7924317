"""vLLM 0.34.0: every way its tiers and stores fail is named, and what they hold back is exported.

Fixtures are reconstructed from the 0.34.0 wheel's own definitions (each file's header cites file:line):
`reasons/promotion_failures`, `reasons/load_errors` (tests/fixtures/reasons/make.py) and `reconstructed/nixl-0.34`.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import FIXTURES
from support.chain import run_chain
from support.prom import families

from kvoffload_exporter.canary.check.diagnose import Action, _action, facts
from kvoffload_exporter.derive.reasons import CanaryFacts, explain
from kvoffload_exporter.derive.window import interval
from kvoffload_exporter.enums import State, StateReason
from kvoffload_exporter.ingest.backends.schema import Evidence
from kvoffload_exporter.ingest.normalise import normalise

REASONS = FIXTURES / "reasons"


def _families(body: bytes) -> dict[str, Any]:
    """Families by name, a counter under its sample name (`_total`) as well."""
    out: dict[str, Any] = {}
    for f in families(body.decode()):
        out[f.name] = f
        if f.type == "counter" and not f.name.endswith("_total"):
            out[f.name + "_total"] = f
    return out


MODEL = "Qwen/Qwen3-0.6B"


def _chain(name: str) -> tuple[str, str]:
    d = REASONS / name
    return (d / "before.prom").read_text(), (d / "after.prom").read_text()


@pytest.mark.parametrize(
    "chain,reason,misnamed",
    [
        ("promotion_failures", StateReason.PROMOTION_FAILURES, StateReason.LOOKUP_ALWAYS_MISSES),
        ("load_errors", StateReason.LOAD_ERRORS, StateReason.SERVED_BY_ANOTHER_CONNECTOR),
    ],
)
def test_a_failing_tier_is_named_for_its_failure(chain: str, reason: StateReason, misnamed: StateReason) -> None:
    before, after = (normalise(t) for t in _chain(chain))
    [(key, d)] = interval(before, after).items()
    assert d.state == State.STORE_WITHOUT_LOAD
    e = after.engine(key)
    assert e is not None
    assert explain(d, e, after.families) == reason  # the wrong answer was `misnamed`
    assert reason != misnamed


@pytest.mark.parametrize("chain", ["promotion_failures", "load_errors"])
def test_check_stops_on_them_as_a_configuration_failure(chain: str) -> None:
    before, after = (normalise(t) for t in _chain(chain))
    f = facts(before, after, MODEL, CanaryFacts(no_load_cycles=3), "no_load", None)
    assert f.reason == chain
    assert _action("no_load", f, None) == Action.CHECK_CONNECTOR  # exit 3, never grow_tier or measure_longer


def test_promotion_failures_are_counted_per_tier() -> None:
    before, after = (normalise(t) for t in _chain("promotion_failures"))
    [(_, d)] = interval(before, after).items()
    failed = {k.tier: v for k, v in d.evidence.items() if k.signal == Evidence.PROMOTION_FAILED}
    hits = {k.tier: v for k, v in d.evidence.items() if k.signal == Evidence.HITS and k.unit == "chunks"}
    assert failed == {"1:fs": 336.0}
    assert hits["1:fs"] == 5376.0


def test_load_errors_count_failed_keys_and_operations() -> None:
    before, after = (normalise(t) for t in _chain("load_errors"))
    [(_, d)] = interval(before, after).items()
    got = {k.unit: v for k, v in d.evidence.items() if k.signal == Evidence.LOAD_FAILED}
    assert got == {"keys": 8160.0, "operations": 32.0}


async def test_serve_exports_the_034_families() -> None:
    exp = await run_chain(list(_chain("promotion_failures")), "0.34.0")
    fams = _families(exp.body)
    for name in (
        "kvoffload_tier_promotion_failures_total",
        "kvoffload_tier_cascade_failures_total",
        "kvoffload_tier_deferred_release_chunks",
        "kvoffload_tier_primary_usage_ratio",
        "kvoffload_tier_transfer_seconds_total",
    ):
        assert name in fams, name
    failures = fams["kvoffload_tier_promotion_failures_total"]
    assert any(s.labels.get("tier") == "1:fs" and s.value == 336.0 for s in failures.samples)
    deferred = fams["kvoffload_tier_deferred_release_chunks"]
    assert {s.labels["tier"] for s in deferred.samples} == {"1:fs"}  # vLLM's value as is, by tier
    reasons = fams["kvoffload_state_reason"]
    assert {"promotion_failures", "load_errors"} <= {s.labels["reason"] for s in reasons.samples}


async def test_integrity_and_transfer_failures_are_exported_without_an_offload_tier() -> None:
    d = FIXTURES / "reconstructed" / "nixl-0.34"
    exp = await run_chain([(d / "before.prom").read_text(), (d / "after.prom").read_text()], "0.34.0")
    fams = _families(exp.body)
    integrity = {s.labels["kind"]: s.value for s in fams["kvoffload_integrity_events_total"].samples}
    assert integrity == {"nan_logits": 2.0, "notification_after_expiry": 2.0}
    transfers = {s.labels["kind"]: s.value for s in fams["kvoffload_kv_transfer_events_total"].samples}
    assert transfers == {"failed_transfer": 3.0, "failed_notification": 1.0, "kv_expired": 1.0}
    states = fams["kvoffload_state"]
    assert any(s.labels["state"] == "not_configured" and s.value == 1.0 for s in states.samples)


async def test_capacity_and_the_config_warning_are_known_from_the_first_poll() -> None:
    """One poll, no traffic: the GPU pool (4,096 blocks x 16 tokens), the CPU tier's own token count
    (kv_offload_config_info, 0.33+), their sum, and the warning that a tier smaller than the pool cannot
    pay off; no state yet (a state needs a window)."""
    small = (REASONS / "tier_smaller_than_gpu_pool" / "before.prom").read_text()
    fams = _families((await run_chain([small], "0.33.0")).body)
    cap = {s.labels["tier"]: (s.labels["basis"], s.value) for s in fams["kvoffload_kv_capacity_tokens"].samples}
    assert cap == {"gpu": ("num_gpu_blocks", 65536.0), "cpu": ("cpu_kv_cache_size_tokens", 32768.0)}
    [eff] = fams["kvoffload_effective_kv_capacity_tokens"].samples
    assert eff.value == 65536.0 + 32768.0
    [warn] = fams["kvoffload_config_warning"].samples
    assert warn.labels["warning"] == "tier_smaller_than_gpu_pool" and warn.value == 1.0
    assert "kvoffload_state" not in fams


async def test_a_tier_larger_than_the_pool_raises_no_warning() -> None:
    body = (FIXTURES / "reconstructed" / "tiering-0.33" / "after-cold.prom").read_text()
    fams = _families((await run_chain([body], "0.33.0")).body)
    [warn] = fams["kvoffload_config_warning"].samples
    assert warn.value == 0.0
    cap = {s.labels["tier"]: s.value for s in fams["kvoffload_kv_capacity_tokens"].samples}
    assert cap["cpu"] > cap["gpu"]


def test_measured_gpu_block_residency_from_the_real_h200_capture() -> None:
    """vLLM's --kv-cache-metrics histograms (real H200 capture, vLLM 0.26.0) read as the measured residency,
    beside the canary's modelled kvoffload_tier_retention_seconds: means of 4.4 s lifetime, 2.9 s idle before
    eviction and 9.7 s between reuses over the capture."""
    d = FIXTURES / "h200-multiprocess"
    before, after = normalise((d / "kvm_00_initial.prom").read_text()), normalise((d / "kvm_12_final.prom").read_text())
    ((_, derived),) = interval(before, after).items()
    total = {k.detail: v for k, v in derived.evidence.items() if k.signal == Evidence.RESIDENCY_SECONDS}
    n = {k.detail: v for k, v in derived.evidence.items() if k.signal == Evidence.RESIDENCY_SAMPLES}
    assert set(total) == set(n) == {"lifetime", "idle_before_evict", "reuse_gap"}
    means = {k: total[k] / n[k] for k in total}
    assert 4.0 < means["lifetime"] < 5.0 and 2.5 < means["idle_before_evict"] < 3.5 and 9.0 < means["reuse_gap"] < 10.5
