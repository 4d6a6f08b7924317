"""The alerts, one builder per group: each takes the shared `Terms` (bundle/alerting/rules.py builds them from the
recorded series and the settings) and returns its group's rules, in the order the rule file lists them.

A new alert goes into its group's builder (or a new group appended to GROUPS); its settings into
bundle/settings.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvoffload_exporter.bundle.alerting.promql import Query, counted_in
from kvoffload_exporter.bundle.alerting.promql import matcher as _m
from kvoffload_exporter.bundle.alerting.promql import num as _num
from kvoffload_exporter.bundle.alerting.promql import pct as _pct
from kvoffload_exporter.bundle.alerting.ruletypes import AlertName, AlertRule
from kvoffload_exporter.bundle.settings import Settings
from kvoffload_exporter.ingest.backends.schema import Evidence

ENGINE_EXTRA = ("window", "quantile", "state")
"""Labels beyond (target, model_name, engine) that windowed/stateset series carry; ignored in joins."""


@dataclass(frozen=True)
class Terms:
    """What the alert groups share: the settings, the query builder, the reuse window and the PromQL pieces
    several groups join on (recorded increases, `ignoring` clauses, the engine's name in a message)."""

    s: Settings
    q: Query
    w: str
    per_unit: Callable[..., str]  # _Rules.per_unit: a backend signal's increase, one series per unit
    store: str
    load: str
    reuse: str
    stored_units: str
    loaded_units: str
    drop_window: str
    ttft: str
    ttft_base: str
    ign: str
    configured: str
    control: str
    engine: str
    busy: str
    canary_ok: str
    canary_err: str


_REASON_NOTE = (
    "{{ with $labels.reason }} The exporter's rules name the likely reason: {{ . }} (runbook: "
    'section "Reason {{ . }}").{{ end }}'
)


def _with_reason(expr: str, reason: str) -> str:
    """Attach the exporter's `kvoffload_state_reason` (the one reason that holds) as a `reason` label
    when it exists; the alert still fires unchanged without it (older exporter, nothing explained)."""
    one = f"topk without (window, reason) (1, {reason} == 1)"
    on = "on (job, instance, target, model_name, engine)"
    return f"(\n{expr}\n)\n* {on} group_left (reason)\n{one}\nor {on}\n(\n{expr}\n)"


def state_alerts(t: Terms) -> list[AlertRule]:
    """What the evidence state says: stores never loaded back, nothing stored, one engine apart."""
    s, q, w = t.s, t.q, t.w
    store, load, reuse, stored_units, loaded_units, engine = (
        t.store,
        t.load,
        t.reuse,
        t.stored_units,
        t.loaded_units,
        t.engine,
    )
    return [
        AlertRule(
            AlertName.STORE_WITHOUT_LOAD,
            _with_reason(
                f"({store} > {_num(s.store_without_load_min_bytes)} or {stored_units} > 0)\n"
                f"unless ignoring (unit) ({load} > 0 or {loaded_units} > 0)\n"
                f"and ignoring (unit) {reuse} > 0",
                q("kvoffload_state_reason"),
            ),
            s.store_without_load_for,
            "warning",
            "KV offload stores blocks but never loads them back while prefixes are reused.",
            f"{engine} stored {{{{ if $labels.unit }}}}{{{{ $value | humanize }}}} {{{{ $labels.unit }}}}"
            f"{{{{ else }}}}{{{{ $value | humanize1024 }}}}B{{{{ end }}}} into the offload tier in the last "
            f"{w} and loaded nothing back, although prompts were served from prefix caches. "
            "Either the tier never gets a hit (GPU cache big enough, no revisits after eviction: "
            "consider store_threshold) or the load path is broken (vllm-project/vllm#47890)." + _REASON_NOTE,
        ),
        AlertRule(
            AlertName.NOT_STORING,
            _with_reason(
                f"max without (state) ({q('kvoffload_state', _m('state', '=', 'not_storing'))} == 1)",
                q("kvoffload_state_reason"),
            ),
            s.not_storing_for,
            "warning",
            "KV offload is configured but stores nothing while the engine computes prompts.",
            f"{engine} computed more prompt tokens than one offload chunk over the exporter's window and "
            "stored nothing into the offload tier: the tier costs pinned host memory and can never help "
            "(a tier smaller than one prompt, stores skipped or dropped, or no store metric)." + _REASON_NOTE,
        ),
        AlertRule(
            AlertName.ENGINE_IMBALANCE,
            f"{store} > {_num(s.store_without_load_min_bytes)}\nunless {load} > 0\n"
            f"and on (job, instance, target, model_name)\n"
            f"(max by (job, instance, target, model_name) ({load}) > 0)",
            s.store_without_load_for,
            "warning",
            "One engine (DP rank) stores into the offload tier and never loads while its siblings load.",
            f"{engine} stored {{{{ $value | humanize1024 }}}}B into the offload tier in the last {w} and "
            "loaded nothing back, while another engine serving the same model on this target did load: "
            "the workload reuses prefixes, but this rank's tier never serves them (routing that sends "
            "revisits elsewhere, a rank-local tier that is full or misconfigured, or a rank-specific bug). "
            "Compare the engines on the overview's per-engine load/store panel.",
        ),
    ]


def latency_alerts(t: Terms) -> list[AlertRule]:
    """TTFT: loads slower than recomputing, slower under load, a regression against the baseline."""
    s, q = t.s, t.q
    ttft, ttft_base, ign, configured, control, engine, busy = (
        t.ttft,
        t.ttft_base,
        t.ign,
        t.configured,
        t.control,
        t.engine,
        t.busy,
    )
    return [
        AlertRule(
            AlertName.SLOWER_THAN_RECOMPUTE,
            f"{q('kvoffload_canary_delta_ttft_seconds', _m('control', '=~', s.slower_controls))}"
            f" > {_num(s.slower_min_delta_seconds)}\n"
            f"and ignoring (control, verdict) "
            f"{q('kvoffload_canary_verdict', _m('verdict', '=', 'offload_slower'))} == 1",
            s.slower_for,
            "warning",
            "Canary requests served from the offload tier are slower than without it.",
            "On {{ $labels.target }} a canary prompt loaded from the offload tier reached its first "
            "token {{ $value | humanizeDuration }} later than the {{ $labels.control }} control, and "
            "the canary verdict is offload_slower: the tier costs more than recomputing the prefix "
            "(small model or short prefix). Consider disabling offload for this model.",
        ),
        AlertRule(
            AlertName.SLOWER_UNDER_LOAD,
            f"{q('kvoffload_canary_band_delta_ttft_seconds', _m('control', '=~', s.slower_controls), busy)}"
            f" > {_num(s.slower_min_delta_seconds)}\n"
            f"and ignoring (bound) "
            f"{q('kvoffload_canary_band_delta_ttft_ci_seconds', _m('bound', '=', 'lower'), busy)} > 0\n"
            f"and on (job, instance, target, load_band) {q('kvoffload_canary_load_band', busy)} == 1",
            s.slower_for,
            "warning",
            "Under the load the target runs now, canary requests served from the offload tier are slower.",
            "On {{ $labels.target }}, in the {{ $labels.load_band }} load band the target is in now, a "
            "canary prompt loaded from the offload tier reached its first token "
            "{{ $value | humanizeDuration }} later than the {{ $labels.control }} control (confidence "
            "interval above 0): loads are convoying behind concurrent requests (vllm#44294). Consider "
            "selective loading under load (max_load_tokens) rather than disabling offload everywhere.",
        ),
        AlertRule(
            AlertName.TTFT_REGRESSION,
            f"(\n  {ttft} > {_num(s.ttft_regression_ratio)} * {ttft_base}\n"
            f"  and {ttft} - {ttft_base} > {_num(s.ttft_regression_min_seconds)}\n"
            f"  and {ign} {configured}\n)\nor\n(\n"
            f"  ({ttft} and {ign} {configured})\n"
            f"  > on (model_name, quantile) group_left ()\n"
            f"  ({_num(s.ttft_control_ratio)} * max by (model_name, quantile) "
            f"({ttft} and {ign} {control}))\n"
            f"  and\n  ({ttft} and {ign} {configured})\n"
            f"  - on (model_name, quantile) group_left ()\n"
            f"  max by (model_name, quantile) ({ttft} and {ign} {control})\n"
            f"  > {_num(s.ttft_regression_min_seconds)}\n)",
            s.ttft_regression_for,
            "warning",
            "Server TTFT of an offloading engine regressed against its baseline or a no-offload control.",
            f"p{_pct(s.ttft_quantile)} TTFT of {engine} averaged {{{{ $value | humanizeDuration }}}} "
            f"over {s.ttft_smoothing}: at least {_num(s.ttft_regression_ratio)}x its value "
            f"{s.ttft_baseline_offset} earlier, or {_num(s.ttft_control_ratio)}x a no-offload "
            "control serving the same model (and more than "
            f"{_num(s.ttft_regression_min_seconds * 1000)} ms slower).",
        ),
    ]


def exporter_alerts(t: Terms) -> list[AlertRule]:
    """The exporter's own view: offload metrics gone, a target down."""
    s, q = t.s, t.q
    return [
        AlertRule(
            AlertName.METRICS_ABSENT,
            f"{q('kvoffload_target_info', _m('generation', '=', 'none'))}\n"
            f"and ignoring (generation, vllm_version)\n"
            f"max_over_time({q('kvoffload_target_info', _m('generation', '!=', 'none'))}[{s.absent_memory}])",
            s.absent_for,
            "warning",
            "Offload metrics vanished from a target that exported them before.",
            "{{ $labels.target }} (vLLM {{ $labels.vllm_version }}) exports no KV offload series, "
            f"but it did within the last {s.absent_memory}: after an upgrade the offload metrics may "
            "have been renamed or hidden, or the connector was dropped from the configuration. "
            "Offload is now unmonitored.",
        ),
        AlertRule(
            AlertName.EXPORTER_TARGET_DOWN,
            f"{q('kvoffload_up')} == 0",
            s.target_down_for,
            "warning",
            "The exporter cannot poll a vLLM target.",
            "The kvoffload exporter {{ $labels.instance }} has failed to read /metrics of "
            "{{ $labels.target }} for " + s.target_down_for + "; all offload panels for it are "
            "empty. kvoffload_scrape_errors_total{reason} says why.",
        ),
    ]


def memory_alerts(t: Terms) -> list[AlertRule]:
    """Host memory against the pinned tier."""
    s, q = t.s, t.q
    return [
        AlertRule(
            AlertName.HOST_MEMORY_HEADROOM_LOW,
            f"{q('kvoffload_host_memory_headroom_bytes')}\n"
            f"< {_num(s.headroom_min_tier_ratio)} * sum without (target, model_name, engine) "
            f"({q('kvoffload_tier_bytes')})",
            s.headroom_for,
            "critical",
            "Host memory headroom is small compared with the pinned offload tier.",
            "Only {{ $value | humanize1024 }}B of memory can still be allocated on "
            "{{ $labels.instance }}, less than "
            f"{_pct(s.headroom_min_tier_ratio)}% of the offload tier configured there. The tier is "
            "pinned and cannot be reclaimed: the next allocation spike or a restart that re-pins "
            "the tier may be OOM-killed.",
        ),
        AlertRule(
            AlertName.TIER_OVERCOMMITTED,
            f"{q('kvoffload_tier_footprint_ratio')} > {_num(s.tier_footprint_max_ratio)}",
            s.tier_footprint_for,
            "warning",
            "The offload tier holds far more host memory than it was configured for.",
            "The vLLM processes of {{ $labels.target }} hold {{ $value | humanize }}x the configured "
            "offload tier as shared memory (counted once across the process tree), more than "
            f"{_num(s.tier_footprint_max_ratio)}x: size memory limits for the footprint, not the flag "
            "(vllm-project/vllm#53042: --kv-offloading-size allocates 1.92x).",
        ),
        AlertRule(
            AlertName.OOM_RISK,
            f"{q('kvoffload_engine_process_tree_cgroup_headroom_bytes')}\n"
            f"< {q('kvoffload_engine_process_tree_growth_step_bytes')}",
            s.oom_risk_for,
            "critical",
            "The vLLM container is closer to its memory limit than its next allocation.",
            "Only {{ $value | humanize1024 }}B are left under the memory limit of the cgroup of "
            "{{ $labels.target }}, less than the next growth step of its process tree (the part of "
            "the offload tier not yet resident, at least 1 GiB): the next allocation is likely an "
            "OOM kill. Shared memory of the pinned tier cannot be reclaimed.",
        ),
    ]


def pressure_alerts(t: Terms) -> list[AlertRule]:
    """A tier that loses stores: allocation failures, dropped writes, store errors."""
    s, q = t.s, t.q
    drop_window, engine = t.drop_window, t.engine
    return [
        AlertRule(
            AlertName.ALLOCATION_FAILURES,
            f"increase({q('kvoffload_allocation_failures_total')}[{s.allocation_window}]) > 0",
            s.allocation_for,
            "warning",
            "The offload tier keeps failing to allocate space for stores.",
            f"{engine} had {{{{ $value | humanize }}}} offload store allocation failures in the last "
            f"{s.allocation_window}: the tier is full of in-flight chunks, so blocks are dropped "
            "instead of offloaded. Enlarge the tier or lower the store rate.",
        ),
        AlertRule(
            AlertName.TIER_DROPPING_WRITES,
            f"({t.per_unit(Evidence.DROPPED, drop_window, _m('reason', '=~', 'backpressure|cpu_full'))}) > 0",
            s.allocation_for,
            "warning",
            "An offload tier keeps silently shedding writes.",
            f"{engine} dropped {{{{ $value | humanize }}}} {{{{ $labels.unit }}}} of offload writes to tier "
            f"'{{{{ $labels.tier }}}}' ({{{{ $labels.reason }}}}) in the last {s.allocation_window}: a slow "
            "secondary tier sheds its cascade writes under backpressure (tiering) or the CPU pool is full "
            "(SimpleCPU), so prefixes never reach it and later revisits recompute.",
        ),
        AlertRule(
            AlertName.STORE_ERRORS,
            f"({t.per_unit(Evidence.DROPPED, drop_window, _m('reason', '=', 'store_error'))}) > 0",
            s.allocation_for,
            "warning",
            "The KV store keeps answering offload puts with errors.",
            f"{engine} had {{{{ $value | humanize }}}} offload puts answered with an error in the last "
            f"{s.allocation_window} (Mooncake store `save_put`, status error): those prefixes are not "
            "stored (their bytes are never counted as stored) and revisits recompute. Check the store's "
            "master, its segments and the transfer engine.",
        ),
    ]


def canary_alerts(t: Terms) -> list[AlertRule]:
    """The canary: failing, never hitting the tier, answers that differ."""
    s, q = t.s, t.q
    control, canary_ok, canary_err = t.control, t.canary_ok, t.canary_err
    return [
        AlertRule(
            AlertName.CANARY_FAILING,
            f"(time() - {q('kvoffload_canary_last_success_timestamp_seconds')} "
            f"> {_num(s.canary_stale_seconds)})\n"
            # A canary that has a budget but never succeeded (wrong model, auth, target down).
            f"or\n({q('kvoffload_canary_budget_remaining_tokens')}\n"
            f"unless {q('kvoffload_canary_last_success_timestamp_seconds')})\n"
            f"or\n({canary_err}\nunless {canary_ok})",
            s.canary_for,
            "warning",
            "The offload canary is not producing results.",
            "The canary for {{ $labels.target }} is not producing results: no cycle completed for "
            f"more than {_num(s.canary_stale_seconds)} s (or none ever did), or every probe in the last "
            f"{s.canary_window} failed. ΔTTFT and the verdict are stale; check "
            "kvoffload_canary_cycles_total{reason} and the canary token budget.",
        ),
        AlertRule(
            AlertName.CANARY_NO_OFFLOAD_HIT,
            f"{q('kvoffload_canary_verdict', _m('verdict', '=', 'no_offload_hit'))} == 1\n"
            # A no-offload control target has no tier to hit (KVOffloadMetricsAbsent covers a lost one).
            f"unless on (job, instance, target) {control}",
            s.canary_for,
            "warning",
            "Canary prefix revisits are never served from the offload tier.",
            "The canary on {{ $labels.target }} evicted its prefix from the GPU and revisited it, "
            "but no offload load happened (verdict no_offload_hit): stores are not turning into "
            "hits. Check that the tier is large enough to keep the prefix and that loads work.",
        ),
        AlertRule(
            AlertName.OUTPUT_MISMATCH,
            counted_in(q("kvoffload_canary_output_mismatches_total"), s.output_mismatch_window),
            "0m",
            "critical",
            "Requests served from the offload tier get different answers.",
            "The canary on {{ $labels.target }} sent the same prompt twice and got other tokens when the "
            "prefix came from the offload tier ({{ $labels.pair }}: {{ $value | humanize }} in the last "
            f"{s.output_mismatch_window}). Users' answers may be corrupted: disable offloading (or loads) "
            "on this server and keep the evidence (`kvoffload-exporter check --out DIR`).",
        ),
        AlertRule(
            AlertName.INTEGRITY_RISK,
            counted_in(q("kvoffload_integrity_events_total"), s.output_mismatch_window),
            "0m",
            "warning",
            "The engine reports events that may corrupt its outputs.",
            f"{t.engine} reported {{{{ $value | humanize }}}} {{{{ $labels.kind }}}} events in the last "
            f"{s.output_mismatch_window}: nan_logits (requests with NaNs in their logits, "
            "VLLM_COMPUTE_NANS_IN_LOGITS=1) or notification_after_expiry (NIXL: the KV blocks may have been "
            "reused before the transfer finished). Compare with KVOffloadOutputMismatch and run "
            "`kvoffload-exporter check` on a staging copy.",
        ),
    ]


GROUPS: tuple[Callable[[Terms], list[AlertRule]], ...] = (
    state_alerts,
    latency_alerts,
    exporter_alerts,
    memory_alerts,
    pressure_alerts,
    canary_alerts,
)
"""The groups in the order of the rule file."""


__all__ = ["ENGINE_EXTRA", "GROUPS", "Terms"]
