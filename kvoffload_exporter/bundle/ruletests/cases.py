"""One firing and one silent case per alert (BUILDERS) and each alert's evaluation step (STEPS)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from kvoffload_exporter.bundle.alerting.promql import Matcher
from kvoffload_exporter.bundle.alerting.ruletypes import AlertName
from kvoffload_exporter.bundle.ruletests import fleet_cases
from kvoffload_exporter.bundle.ruletests import testvalues as tv
from kvoffload_exporter.bundle.ruletests.base import (
    B5,
    DROPPED,
    FS,
    GIB,
    J3,
    RECORDED_STEP_MAX,
    Builder,
    Case,
    _absent_step,
    _counter,
    _dividing,
    _Env,
    _gauge,
    _quarter,
    _v,
)
from kvoffload_exporter.bundle.settings import Settings


def _store_without_load(e: _Env, fire: bool) -> tuple[Case, int]:
    s, w = e.s, tv.duration_ms(e.s.reuse_window)
    rate = max(682622976, int(s.store_without_load_min_bytes * e.step / w) + 1)
    t = e.at(s.reuse_window, s.store_without_load_for)
    c = Case("stores clear the minimum in the window, zero loads, prefix reuse" if fire else "loads happen")
    lb = e.labels(c, B5)
    c.series = [
        ("kvoffload_store_bytes_total", lb, _counter(rate, e.n(t))),
        ("kvoffload_load_bytes_total", lb, _counter(0 if fire else 1000, e.n(t))),
        ("kvoffload_gpu_prefix_hits_tokens_total", lb, _counter(100, e.n(t))),
    ]
    c.expected = [(lb, rate * (w // e.step))] if fire else []
    return c, t


def _engine_imbalance(e: _Env, fire: bool) -> tuple[Case, int]:
    s, w = e.s, tv.duration_ms(e.s.reuse_window)
    rate = max(682622976, int(s.store_without_load_min_bytes * e.step / w) + 1)
    t = e.at(s.reuse_window, s.store_without_load_for)
    c = Case("engine 1 stores and never loads while engine 0 loads" if fire else "both engines load")
    e0, e1 = e.labels(c, B5, engine="0"), e.labels(c, B5, engine="1")
    c.fits &= e0 != e1
    c.series = [("kvoffload_store_bytes_total", lb, _counter(rate, e.n(t))) for lb in (e0, e1)]
    c.series += [
        ("kvoffload_load_bytes_total", e0, _counter(rate, e.n(t))),
        ("kvoffload_load_bytes_total", e1, _counter(0 if fire else rate, e.n(t))),
    ]
    c.expected = [(e1, rate * (w // e.step))] if fire else []
    return c, t


def _control(e: _Env) -> str:
    """A canary control the rules' `slower_controls` regex selects."""
    m = Matcher("control", "=~", e.s.slower_controls)
    return next((x for x in [*tv._examples(e.s.slower_controls), "recompute"] if tv.matches(m, x)), "recompute")


def _slower(e: _Env, fire: bool) -> tuple[Case, int]:
    s, t = e.s, e.at(e.s.slower_for)
    delta = s.slower_min_delta_seconds + (0.0277 if fire else -0.5)
    c = Case(f"offload hit {delta:+g} s vs the control, verdict offload_slower")
    lb = e.labels(c, J3, control=_control(e))
    c.series = [
        ("kvoffload_canary_delta_ttft_seconds", lb, _gauge(delta, e.n(t))),
        ("kvoffload_canary_verdict", e.labels(c, J3, verdict="offload_slower"), _gauge(1, e.n(t))),
    ]
    c.expected = [(lb, delta)] if fire else []
    return c, t


def _slower_under_load(e: _Env, fire: bool) -> tuple[Case, int]:
    s, t = e.s, e.at(e.s.slower_for)
    delta = s.slower_min_delta_seconds + 0.04
    c = Case("slower in the high band, the band the target is in" if fire else "slower only in a band not current")
    lb = e.labels(c, J3, control=_control(e), load_band="high")
    c.series = [
        ("kvoffload_canary_band_delta_ttft_seconds", lb, _gauge(delta, e.n(t))),
        ("kvoffload_canary_band_delta_ttft_ci_seconds", {**lb, "bound": "lower"}, _gauge(0.01, e.n(t))),
        ("kvoffload_canary_load_band", e.labels(c, J3, load_band="high"), _gauge(1 if fire else 0, e.n(t))),
        ("kvoffload_canary_load_band", e.labels(c, J3, load_band="low"), _gauge(0 if fire else 1, e.n(t))),
    ]
    c.fits &= all(tv.matches(m, lb.get(m.label, "")) for m in e.sel if m.label == "bound")
    c.expected = [(lb, delta)] if fire else []
    return c, t


def _ttft_regression(e: _Env, fire: bool) -> tuple[Case, int]:
    s, t, ctl = e.s, e.at(e.s.ttft_regression_for), 0.1
    slow = round(max(ctl * s.ttft_control_ratio, ctl + s.ttft_regression_min_seconds) + 0.2, 3) if fire else ctl
    c = Case(f"offload target {slow:g} s vs a no-offload control serving the same model at {ctl:g} s")
    q = {"window": "5m", "quantile": s.ttft_quantile}
    off, con = e.labels(c, B5, **q), e.labels(c, B5, target="vllm-control", **q)
    c.fits &= off.get("target") != con.get("target")
    for lb, v, nc in ((off, slow, 0), (con, ctl, 1)):
        c.series.append(("kvoffload_ttft_seconds", lb, _gauge(v, e.n(t))))
        state = {k: x for k, x in lb.items() if k not in q}
        c.series.append(("kvoffload_state", {**state, "state": "not_configured"}, _gauge(nc, e.n(t))))
    c.expected = [(off, slow)] if fire else []
    return c, t


def _metrics_absent(e: _Env, fire: bool) -> tuple[Case, int]:
    s = e.s
    t = 2 * e.step + e.at(s.absent_for, plus=0)
    c = Case("upgrade drops the offload families (generation flat -> none)" if fire else "never had offload")
    c.fits &= not fire or t <= tv.duration_ms(s.absent_memory)
    new = e.labels(c, J3, vllm_version="0.34.0", generation="none")
    old = e.labels(c, J3, vllm_version="0.26.0", generation="flat")
    c.series = [("kvoffload_target_info", new, f"_x2 1x{e.n(t)}" if fire else _gauge(1, e.n(t)))]
    c.series += [("kvoffload_target_info", old, "1x1")] if fire else []
    c.expected = [(new, 1)] if fire else []
    return c, t


def _gauge_case(metric: str, keys: Sequence[str], bad: float, good: float, for_: str, what: str) -> Builder:
    def build(e: _Env, fire: bool) -> tuple[Case, int]:
        t = e.at(getattr(e.s, for_))
        c = Case(f"{what} {_v(bad if fire else good)}")
        lb = e.labels(c, keys)
        c.series = [(metric, lb, _gauge(bad if fire else good, e.n(t)))]
        c.expected = [(lb, bad)] if fire else []
        return c, t

    return build


def _headroom(e: _Env, fire: bool) -> tuple[Case, int]:
    s, t, tier = e.s, e.at(e.s.headroom_for), 8_000_000_000
    head = (int(s.headroom_min_tier_ratio * tier / 2) if s.headroom_min_tier_ratio > 0 else -GIB) if fire else None
    head = head if head is not None else int(s.headroom_min_tier_ratio * tier * 2) + GIB
    c = Case(f"headroom {head} B next to an {tier} B tier")
    lb = e.labels(c, ("job", "instance"))
    c.series = [
        ("kvoffload_host_memory_headroom_bytes", lb, _gauge(head, e.n(t))),
        ("kvoffload_tier_bytes", e.labels(c, B5), _gauge(tier, e.n(t))),
    ]
    c.expected = [(lb, head)] if fire else []
    return c, t


def _overcommitted(e: _Env, fire: bool) -> tuple[Case, int]:
    limit = e.s.tier_footprint_max_ratio
    return _gauge_case(
        "kvoffload_tier_footprint_ratio", J3, limit + 0.38, limit / 2, "tier_footprint_for", "footprint ratio"
    )(e, fire)


def _oom(e: _Env, fire: bool) -> tuple[Case, int]:
    t = e.at(e.s.oom_risk_for)
    head = GIB // 2 if fire else 10 * GIB
    c = Case(f"cgroup headroom {head} B, growth step {GIB} B")
    lb = e.labels(c, J3)
    c.series = [
        ("kvoffload_engine_process_tree_cgroup_headroom_bytes", lb, _gauge(head, e.n(t))),
        ("kvoffload_engine_process_tree_growth_step_bytes", lb, _gauge(GIB, e.n(t))),
    ]
    c.expected = [(lb, head)] if fire else []
    return c, t


def _failing_counter(metric: str, own: Mapping[str, str], unit: str = "") -> Builder:
    def build(e: _Env, fire: bool) -> tuple[Case, int]:
        s = e.s
        t = e.at(s.allocation_window, s.allocation_for)
        c = Case("one more every step" if fire else "counter flat")
        lb = e.labels(c, B5, **own)
        c.series = [(metric, lb, _counter(1, e.n(t)) if fire else _gauge(5, e.n(t)))]
        alert = {**lb, "unit": unit} if unit else lb  # a kvoffload_backend_* family's unit: named by the alert
        c.expected = [(alert, tv.duration_ms(s.allocation_window) // e.step)] if fire else []
        return c, t

    return build


def _canary_failing(e: _Env, fire: bool) -> tuple[Case, int]:
    t = e.at(e.s.canary_for)
    c = Case("a token budget and no successful cycle ever" if fire else "a cycle succeeds every step")
    lb = e.labels(c, J3)
    c.series = [("kvoffload_canary_budget_remaining_tokens", lb, _gauge(1000, e.n(t)))]
    if not fire:  # the timestamp runs one second ahead of the clock: never stale
        c.series.append(("kvoffload_canary_last_success_timestamp_seconds", lb, f"1+{_v(e.step / 1000)}x{e.n(t)}"))
    c.expected = [(lb, 1000)] if fire else []
    return c, t


def _no_offload_hit(e: _Env, fire: bool) -> tuple[Case, int]:
    t = e.at(e.s.canary_for)
    c = Case("verdict no_offload_hit" if fire else "verdict no_offload_hit cleared")
    lb = e.labels(c, J3, verdict="no_offload_hit")
    c.series = [("kvoffload_canary_verdict", lb, _gauge(1 if fire else 0, e.n(t)))]
    c.expected = [(lb, 1)] if fire else []
    return c, t


def _not_storing(e: _Env, fire: bool) -> tuple[Case, int]:
    t = e.at(e.s.not_storing_for)
    c = Case("state not_storing" if fire else "state storing")
    lb = e.labels(c, B5)
    c.series = [("kvoffload_state", {**lb, "state": "not_storing" if fire else "storing"}, _gauge(1, e.n(t)))]
    c.expected = [(lb, 1)] if fire else []
    return c, t


def _one_event(metric: str, base: Sequence[str], fires: str, silent: str, **extra: str) -> Builder:
    """A counter that grows by one inside the output-mismatch window fires at once; flat at 0 stays silent."""

    def build(e: _Env, fire: bool) -> tuple[Case, int]:
        t = e.at(e.s.output_mismatch_window)
        c = Case(fires if fire else silent)
        lb = e.labels(c, base, **extra)
        c.series = [(metric, lb, f"0x{e.n(t) - 1} 1" if fire else _gauge(0, e.n(t)))]
        c.expected = [(lb, 1)] if fire else []
        return c, t

    return build


_output_mismatch = _one_event(
    "kvoffload_canary_output_mismatches_total", J3, "one mismatch", "every answer equal", pair="offload_vs_gpu"
)
_integrity_risk = _one_event(
    "kvoffload_integrity_events_total", B5, "one request with NaN logits", "no integrity event", kind="nan_logits"
)


BUILDERS: Mapping[str, Builder] = {
    AlertName.STORE_WITHOUT_LOAD: _store_without_load,
    AlertName.NOT_STORING: _not_storing,
    AlertName.ENGINE_IMBALANCE: _engine_imbalance,
    AlertName.SLOWER_THAN_RECOMPUTE: _slower,
    AlertName.SLOWER_UNDER_LOAD: _slower_under_load,
    AlertName.TTFT_REGRESSION: _ttft_regression,
    AlertName.METRICS_ABSENT: _metrics_absent,
    AlertName.EXPORTER_TARGET_DOWN: _gauge_case("kvoffload_up", J3, 0, 1, "target_down_for", "up"),
    AlertName.HOST_MEMORY_HEADROOM_LOW: _headroom,
    AlertName.TIER_OVERCOMMITTED: _overcommitted,
    AlertName.OOM_RISK: _oom,
    AlertName.ALLOCATION_FAILURES: _failing_counter("kvoffload_allocation_failures_total", {}),
    AlertName.TIER_DROPPING_WRITES: _failing_counter(
        DROPPED % "blocks", dict(tier=FS, reason="backpressure"), "blocks"
    ),
    AlertName.STORE_ERRORS: _failing_counter(DROPPED % "stores", {"reason": "store_error"}, "stores"),
    AlertName.CANARY_FAILING: _canary_failing,
    AlertName.CANARY_NO_OFFLOAD_HIT: _no_offload_hit,
    AlertName.OUTPUT_MISMATCH: _output_mismatch,
    AlertName.INTEGRITY_RISK: _integrity_risk,
    **fleet_cases.BUILDERS,
}
"""One case builder per alert; tests/test_alerts.py fails when an alert has none."""

STEPS: Mapping[str, Callable[[Settings], int]] = {
    AlertName.STORE_WITHOUT_LOAD: lambda s: _dividing(s.reuse_window, RECORDED_STEP_MAX),
    AlertName.NOT_STORING: lambda s: _quarter(s.not_storing_for),
    AlertName.ENGINE_IMBALANCE: lambda s: _dividing(s.reuse_window, RECORDED_STEP_MAX),
    AlertName.SLOWER_THAN_RECOMPUTE: lambda s: _quarter(s.slower_for),
    AlertName.SLOWER_UNDER_LOAD: lambda s: _quarter(s.slower_for),
    AlertName.TTFT_REGRESSION: lambda s: min(_quarter(s.ttft_regression_for), RECORDED_STEP_MAX),
    AlertName.METRICS_ABSENT: _absent_step,
    AlertName.EXPORTER_TARGET_DOWN: lambda s: _quarter(s.target_down_for),
    AlertName.HOST_MEMORY_HEADROOM_LOW: lambda s: _quarter(s.headroom_for),
    AlertName.TIER_OVERCOMMITTED: lambda s: _quarter(s.tier_footprint_for),
    AlertName.OOM_RISK: lambda s: _quarter(s.oom_risk_for),
    AlertName.ALLOCATION_FAILURES: lambda s: _dividing(s.allocation_window),
    AlertName.TIER_DROPPING_WRITES: lambda s: _dividing(s.allocation_window),
    AlertName.STORE_ERRORS: lambda s: _dividing(s.allocation_window),
    AlertName.CANARY_FAILING: lambda s: _quarter(s.canary_for),
    AlertName.CANARY_NO_OFFLOAD_HIT: lambda s: _quarter(s.canary_for),
    AlertName.OUTPUT_MISMATCH: lambda s: _dividing(s.output_mismatch_window),
    AlertName.INTEGRITY_RISK: lambda s: _dividing(s.output_mismatch_window),
    **fleet_cases.STEPS,
}
"""Each alert's evaluation step (its own file: promtool has one evaluation_interval per file)."""
