"""Canary state → `kvoffload_canary_*` samples: a collector like the others; pure, names from the catalogue.

Sample output (one target, abridged):

    kvoffload_canary_ttft_seconds{target="gpu0",path="offload_hit",quantile="0.5"} 0.0619
    kvoffload_canary_delta_ttft_seconds{target="gpu0",control="control_target"} 0.0277
    kvoffload_canary_delta_ttft_ci_seconds{target="gpu0",control="control_target",bound="lower"} 0.0201
    kvoffload_canary_probes_total{target="gpu0",result="offload_hit"} 10.0
    kvoffload_canary_verdict{target="gpu0",verdict="offload_slower"} 1.0
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from kvoffload_exporter.canary.cycle.state import CanaryState
from kvoffload_exporter.canary.cycle.stats import quantile
from kvoffload_exporter.catalogue import (
    CANARY_ERROR_REASONS,
    CANARY_LOAD_BANDS,
    CANARY_OUTPUT_PAIRS,
    CANARY_PATHS,
    CANARY_REASONS,
    CANARY_RESULTS,
    CANARY_TIERS,
    CANARY_VERDICTS,
)
from kvoffload_exporter.enums import VerdictKind
from kvoffload_exporter.expose.collector import SampleSink

QUANTILES = (0.25, 0.5, 0.75)


class HasState(Protocol):
    """What the collector reads of an engine: its live state (replaced or mutated after each cycle)."""

    @property
    def state(self) -> CanaryState: ...


class CanaryCollector:
    """`collector.Collector` for the canary: the engines' current state, read on every render."""

    def __init__(self, engines: Sequence[HasState]) -> None:
        self._engines = engines

    def collect(self, x: SampleSink) -> None:
        render(x, [e.state for e in self._engines])


def _bands(x: SampleSink, st: CanaryState, t: dict[str, str]) -> None:
    """Per-load-band ΔTTFT (serve --canary.enabled): absent until a band has a verdict with estimates."""
    for band in CANARY_LOAD_BANDS:
        x.add("kvoffload_canary_band_cycles_total", float(st.band_cycles.get(band, 0)), {**t, "load_band": band})
        v = st.band_verdicts.get(band)
        for name, est in sorted(v.estimates.items() if v else ()):
            lb = {**t, "control": name, "load_band": band}
            x.add("kvoffload_canary_band_delta_ttft_seconds", est.delta, lb)
            x.add("kvoffload_canary_band_delta_ttft_ci_seconds", est.lower, {**lb, "bound": "lower"})
            x.add("kvoffload_canary_band_delta_ttft_ci_seconds", est.upper, {**lb, "bound": "upper"})
    if st.load_band is not None:
        x.add_states("kvoffload_canary_load_band", t, CANARY_LOAD_BANDS, st.load_band)


def _output(x: SampleSink, st: CanaryState, t: dict[str, str]) -> None:
    """The output check (outputcheck.py): comparisons and mismatches per pair, pre-created at 0."""
    out = st.output
    for pair in CANARY_OUTPUT_PAIRS:
        x.add("kvoffload_canary_output_compared_total", float(out.compared[pair]), {**t, "pair": pair})
        x.add("kvoffload_canary_output_mismatches_total", float(out.mismatched[pair]), {**t, "pair": pair})
    if out.sensitive is not None:
        x.add("kvoffload_canary_output_sensitive", 1.0 if out.sensitive else 0.0, t)


def render(x: SampleSink, states: Iterable[CanaryState]) -> None:
    for st in states:
        t = {"target": st.label}
        for path in CANARY_PATHS:
            xs = list(st.samples.get(path, ()))
            if xs:  # a summary: quantiles of the recent samples; count and sum of every counted TTFT (cumulative)
                qs = {q: quantile(xs, q) for q in QUANTILES}
                n, total = float(st.ttft_count[path]), st.ttft_sum.get(path, 0.0)
                x.add_summary("kvoffload_canary_ttft_seconds", {**t, "path": path}, qs, n, total)
        verdict = st.verdict
        for name, est in sorted(verdict.estimates.items() if verdict else ()):
            x.add("kvoffload_canary_delta_ttft_seconds", est.delta, {**t, "control": name})
            x.add("kvoffload_canary_delta_ttft_ci_seconds", est.lower, {**t, "control": name, "bound": "lower"})
            x.add("kvoffload_canary_delta_ttft_ci_seconds", est.upper, {**t, "control": name, "bound": "upper"})
        # Pre-created at 0 so increase() works from the first probe, like the scrape error reasons.
        for result in CANARY_RESULTS:
            x.add("kvoffload_canary_probes_total", float(st.probes.get(result, 0)), {**t, "result": result})
        for reason in CANARY_REASONS:
            x.add("kvoffload_canary_cycles_total", float(st.cycles.get(reason, 0)), {**t, "reason": reason})
        for err in CANARY_ERROR_REASONS:
            x.add("kvoffload_canary_errors_total", float(st.errors.get(err, 0)), {**t, "reason": err})
        x.add("kvoffload_canary_up", 1.0 if st.up else 0.0, t)
        x.add("kvoffload_canary_restarts_total", float(st.restarts), t)
        x.add("kvoffload_canary_tokens_spent_total", float(st.tokens_spent), t)
        x.add("kvoffload_canary_budget_remaining_tokens", st.budget_remaining, t)
        x.add("kvoffload_canary_last_success_timestamp_seconds", st.last_success, t)
        for tier in CANARY_TIERS:
            x.add("kvoffload_canary_residency_seconds", st.residency.get(tier), {**t, "tier": tier})
        x.add("kvoffload_tier_retention_seconds", st.retention_seconds(), t)
        _bands(x, st, t)
        _output(x, st, t)
        current = verdict.verdict if verdict else "inconclusive"
        if sum(st.output.mismatched.values()):  # wrong answers outrank every speed verdict
            current = VerdictKind.OUTPUT_MISMATCH
        x.add_states("kvoffload_canary_verdict", t, CANARY_VERDICTS, current)
