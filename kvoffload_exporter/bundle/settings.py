"""Thresholds, windows and durations of every alert, defined once for the rules, Grafana alerts and docs.

Every field says when to change it (its `doc`, listed in docs/alerts.md) and what kind of value it takes;
`bundle --set KEY=VALUE` and `--preset` override them through `with_sets()`, which checks each value, so
a typo fails the render with one line instead of a rule file promtool (or Prometheus) rejects later.
The committed files always use `DEFAULT`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TypeVar

from kvoffload_exporter import PROJECT_URL  # defined at the root: the CLI's help names it without importing bundle
from kvoffload_exporter.catalogue import STATE_MEANINGS
from kvoffload_exporter.config.schema import did_you_mean, prometheus_duration
from kvoffload_exporter.derive.window import QUANTILES
from kvoffload_exporter.enums import State

RUNBOOK_URL = f"{PROJECT_URL}/blob/main/alerts/runbook.md"
"""Where `runbook_url` points (anchor = lower-case alert name): an absolute URL, so the link in a notification
opens from Alertmanager or Grafana. The default is the published runbook of the release; render with
`bundle --runbook-url https://<where you host alerts/runbook.md>` to point at your own copy."""


class Kind(StrEnum):
    """What a setting's value is; decides how `--set` parses and checks it."""

    DURATION = "duration"  # a Prometheus duration: 30s, 5m, 1h30m
    NUMBER = "number"  # a non-negative number
    QUANTILE = "quantile"  # one of the TTFT quantiles the exporter exports
    REGEX = "regex"  # a label-value regex (RE2 subset)
    TEXT = "text"  # free text (uids, folder names, URLs)


T = TypeVar("T", str, float)


def _s(default: T, kind: Kind, doc: str) -> T:
    return field(default=default, metadata={"kind": kind, "doc": doc})


@dataclass(frozen=True)
class Settings:
    # --- KVOffloadStoreWithoutLoad ---------------------------------------------------------------
    reuse_window: str = _s(
        "1h",
        Kind.DURATION,
        "Window over which stores, loads and prefix reuse are compared. Long enough that a tier which loads "
        "a few times an hour is not flagged (vllm-project/vllm#47890 stored for hours with 0 loads).",
    )
    store_without_load_min_bytes: float = _s(
        1e9,
        Kind.NUMBER,
        "Ignore trickles: at least this many bytes stored in the window (a smoke request stores 7 MB).",
    )
    store_without_load_for: str = _s("30m", Kind.DURATION, "`for` of KVOffloadStoreWithoutLoad.")

    # --- KVOffloadNotStoring ----------------------------------------------------------------------
    not_storing_for: str = _s(
        "30m",
        Kind.DURATION,
        f"`for` of KVOffloadNotStoring: how long the exporter's state has been `{State.NOT_STORING}` — "
        f"{STATE_MEANINGS[State.NOT_STORING]}.",
    )

    # --- KVOffloadSlowerThanRecompute -------------------------------------------------------------
    slower_controls: str = _s(
        "cold|recompute|control_target",
        Kind.REGEX,
        "Canary controls an offload hit is compared with (gpu_hit is excluded: a GPU hit is always faster).",
    )
    slower_min_delta_seconds: float = _s(
        0.0, Kind.NUMBER, "ΔTTFT above this (seconds) counts as slower; raise it to tolerate a small, known cost."
    )
    slower_for: str = _s("15m", Kind.DURATION, "`for` of KVOffloadSlowerThanRecompute.")

    # --- KVOffloadTTFTRegression ------------------------------------------------------------------
    ttft_quantile: str = _s("0.9", Kind.QUANTILE, "Server TTFT quantile compared (one the exporter exports).")
    ttft_smoothing: str = _s("30m", Kind.DURATION, "Averaging window of the exporter's windowed TTFT quantile.")
    ttft_baseline_offset: str = _s(
        "1d", Kind.DURATION, "Baseline: the same quantity this long ago (1d: diurnal load patterns cancel out)."
    )
    ttft_regression_ratio: float = _s(1.5, Kind.NUMBER, "Fire when TTFT is this many times its baseline ...")
    ttft_regression_min_seconds: float = _s(
        0.05, Kind.NUMBER, "... and at least this many seconds slower (tiny models jitter)."
    )
    ttft_control_ratio: float = _s(
        1.2, Kind.NUMBER, "Offload target vs a no-offload control serving the same model: fire above this ratio."
    )
    ttft_regression_for: str = _s("30m", Kind.DURATION, "`for` of KVOffloadTTFTRegression.")

    # --- KVOffloadMetricsAbsent -------------------------------------------------------------------
    absent_memory: str = _s(
        "1d", Kind.DURATION, "How long a target is remembered as having had offload series (the alert stops after)."
    )
    absent_for: str = _s("10m", Kind.DURATION, "`for` of KVOffloadMetricsAbsent.")

    # --- KVOffloadExporterTargetDown --------------------------------------------------------------
    target_down_for: str = _s("5m", Kind.DURATION, "`for` of KVOffloadExporterTargetDown.")

    # --- KVOffloadHostMemoryHeadroomLow -----------------------------------------------------------
    headroom_min_tier_ratio: float = _s(
        0.2,
        Kind.NUMBER,
        "Fire when headroom is below this share of the configured (pinned, unreclaimable) tier.",
    )
    headroom_for: str = _s("5m", Kind.DURATION, "`for` of KVOffloadHostMemoryHeadroomLow.")

    # --- KVOffloadTierOvercommitted / KVOffloadOOMRisk (docs/memory.md) ---------------------------
    tier_footprint_max_ratio: float = _s(
        1.5,
        Kind.NUMBER,
        "Fire when the vLLM tree's shared memory exceeds this many times the configured tier "
        "(vllm-project/vllm#53042: 1.92; H200 Qwen3-0.6B 8 GB tier: 1.88). 1.5 leaves room for the tree's "
        "own shared segments.",
    )
    tier_footprint_for: str = _s("15m", Kind.DURATION, "`for` of KVOffloadTierOvercommitted.")
    oom_risk_for: str = _s(
        "5m",
        Kind.DURATION,
        "`for` of KVOffloadOOMRisk: cgroup headroom below the growth step (the tier not yet resident, at least "
        "1 GiB) for this long.",
    )

    # --- KVOffloadAllocationFailures, KVOffloadTierDroppingWrites, KVOffloadStoreErrors -----------
    allocation_window: str = _s(
        "10m",
        Kind.DURATION,
        "Window counted. Keep `allocation_for` longer: one burst (or a counter reset) that leaves the window "
        "before `for` elapses never fires; sustained failures do.",
    )
    allocation_for: str = _s(
        "15m",
        Kind.DURATION,
        "`for` of KVOffloadAllocationFailures, KVOffloadTierDroppingWrites and KVOffloadStoreErrors.",
    )

    # --- KVOffloadCanaryFailing / KVOffloadCanaryNoOffloadHit -------------------------------------
    canary_window: str = _s("30m", Kind.DURATION, "Window in which every canary probe failing fires.")
    canary_stale_seconds: float = _s(1800.0, Kind.NUMBER, "Fire when no canary cycle succeeded for this many seconds.")
    canary_for: str = _s("10m", Kind.DURATION, "`for` of KVOffloadCanaryFailing and KVOffloadCanaryNoOffloadHit.")

    # --- KVOffloadOutputMismatch ------------------------------------------------------------------
    output_mismatch_window: str = _s(
        "1h",
        Kind.DURATION,
        "Window of KVOffloadOutputMismatch: one canary answer changed by the tier in it fires at once (`for: 0m`) "
        "and keeps the alert firing until it leaves the window.",
    )

    # --- KVOffloadExporterDown, KVOffloadExporterJobVanished, KVOffloadExporterAbsent ---------------
    exporter_jobs: str = _s(
        ".*kvoffload.*",
        Kind.REGEX,
        "Prometheus jobs that scrape an exporter: sidecars, central exporters, sharded replicas' own /metrics "
        "and their /probe jobs. Their `up` tells a lost exporter, whose kvoffload series vanish rather than turn 0. "
        "And-ed with a `--selector` on `job`: set it to match that job (or `.+`).",
    )
    exporter_down_for: str = _s(
        "5m",
        Kind.DURATION,
        "`for` of KVOffloadExporterDown, KVOffloadExporterJobVanished and KVOffloadExporterAbsent (longer than "
        "an exporter's restart).",
    )

    # --- Grafana-managed alerts and links ---------------------------------------------------------
    grafana_datasource_uid: str = _s("prometheus", Kind.TEXT, "Prometheus datasource uid the Grafana rules query.")
    grafana_folder: str = _s("KV offload", Kind.TEXT, "Grafana folder of the rules and dashboards.")
    grafana_interval: str = _s("1m", Kind.DURATION, "Evaluation interval of the Grafana rule group.")
    runbook_url: str = _s(
        RUNBOOK_URL, Kind.TEXT, "Base of each alert's runbook_url; set it where you host alerts/runbook.md."
    )

    def with_sets(self, pairs: Iterable[str]) -> Settings:
        """`["reuse_window=5m", ...]` applied in order. ValueError (one line) on an unknown key or bad value."""
        changes: dict[str, str | float] = {}
        for raw in pairs:
            key, sep, value = raw.partition("=")
            key = key.strip()
            if not sep:
                raise ValueError(f"--set wants KEY=VALUE, got {raw!r}")
            changes[key] = parse_value(key, value.strip())
        return replace(self, **changes)  # type: ignore[arg-type]

    def preset(self, name: str) -> Settings:
        if name not in PRESETS:
            hint = did_you_mean(name, PRESETS)
            raise ValueError(f"unknown preset {name!r}{hint}; known: {', '.join(sorted(PRESETS))}")
        return self.with_sets(f"{k}={v}" for k, v in PRESETS[name].items())


FIELDS: Mapping[str, dataclasses.Field[object]] = {f.name: f for f in dataclasses.fields(Settings)}
"""Every setting, in definition order: the keys `bundle --set` accepts (listed in docs/alerts.md)."""

_RE2_UNSUPPORTED = re.compile(r"\(\?[=!<]|\\[1-9]")  # look-around and back-references: Go's RE2 has none


def kind_of(key: str) -> Kind:
    kind = FIELDS[key].metadata["kind"]
    assert isinstance(kind, Kind)
    return kind


def doc_of(key: str) -> str:
    return str(FIELDS[key].metadata["doc"])


def parse_value(key: str, value: str) -> str | float:
    """One `--set` value, checked for its setting's kind."""
    if key not in FIELDS:
        hint = did_you_mean(key, FIELDS)
        raise ValueError(f"unknown setting {key!r}" + (hint or f"; known: {', '.join(FIELDS)}"))
    kind = kind_of(key)
    if kind is Kind.NUMBER:
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"{key} wants a number, got {value!r}") from None
        if not number >= 0 or number == float("inf"):
            raise ValueError(f"{key} wants a finite number >= 0, got {value}")
        return number
    if kind is Kind.DURATION:  # the one grammar of every command: plain seconds become `2s`, `1.5h` `1h30m`
        try:
            return prometheus_duration(value)
        except ValueError:
            raise ValueError(f"{key} wants a duration such as 2 (seconds), 30s, 5m or 1h30m, got {value!r}") from None
    if kind is Kind.QUANTILE and value not in {str(q) for q in QUANTILES}:
        raise ValueError(f"{key} wants one of the exported quantiles {', '.join(map(str, QUANTILES))}, got {value!r}")
    if kind is Kind.REGEX:
        check_regex(key, value)
    if kind is Kind.TEXT and not value:
        raise ValueError(f"{key} must not be empty")
    return value


def check_regex(what: str, value: str) -> None:
    """Compile a PromQL label regex (fully anchored, RE2): ValueError with the reason when it cannot."""
    if _RE2_UNSUPPORTED.search(value):
        raise ValueError(f"{what}: regex {value!r} uses look-around or back-references, which PromQL (RE2) lacks")
    try:
        re.compile(value)
    except re.error as e:
        raise ValueError(f"{what}: invalid regex {value!r}: {e}") from None


PRESETS: Mapping[str, Mapping[str, str]] = {
    # A staging rehearsal: every alert can fire within minutes of its fault, with Prometheus scraping
    # every 15 s or faster (each window holds >= 4 scrapes). tests/test_prometheus_e2e.py runs the rules
    # rendered with it against a real Prometheus.
    "rehearsal": {
        "reuse_window": "1m",
        "store_without_load_min_bytes": "1",
        "store_without_load_for": "30s",
        "not_storing_for": "30s",
        "slower_for": "30s",
        "ttft_smoothing": "1m",
        "ttft_baseline_offset": "5m",
        "ttft_regression_for": "30s",
        "absent_memory": "10m",
        "absent_for": "30s",
        "target_down_for": "30s",
        "headroom_for": "30s",
        "tier_footprint_for": "30s",
        "oom_risk_for": "30s",
        "allocation_window": "1m",
        "allocation_for": "30s",
        "canary_window": "1m",
        "canary_stale_seconds": "120",
        "canary_for": "30s",
        "output_mismatch_window": "1m",
        "exporter_down_for": "30s",
        "grafana_interval": "10s",
    },
}
"""Named lists of `--set`s (`bundle --preset NAME`), documented in docs/alerts.md."""

DEFAULT = Settings()
