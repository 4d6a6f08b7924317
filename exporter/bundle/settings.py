"""Thresholds, windows and durations of every alert, defined once for the rules, Grafana alerts and tests.

Each value says when to change it. The e2e test builds a `fast()` copy with second-scale windows; the
committed files always use `DEFAULT`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

RUNBOOK_URL = "alerts/runbook.md"
"""Where `runbook_url` points (anchor = lower-case alert name). The default is the bundle's own file, not a
link: render with `bundle --runbook-url https://<where you host alerts/runbook.md>` to make it clickable."""


@dataclass(frozen=True)
class Settings:
    # --- KVOffloadStoreWithoutLoad ---------------------------------------------------------------
    # Window over which stores, loads and prefix reuse are compared. Long enough that a tier which
    # loads a few times an hour is not flagged; vllm-project/vllm#47890 stored for hours with 0 loads.
    reuse_window: str = "1h"
    # Ignore trickles (a smoke request stores one 7 MB chunk): at least this many bytes stored.
    store_without_load_min_bytes: float = 1e9
    store_without_load_for: str = "30m"

    # --- KVOffloadSlowerThanRecompute -------------------------------------------------------------
    # Canary controls an offload hit is compared with. gpu_hit is excluded: a GPU hit is always faster.
    slower_controls: str = "cold|recompute|control_target"
    # ΔTTFT above this (seconds) counts as slower; raise it to tolerate a small, known cost.
    slower_min_delta_seconds: float = 0.0
    slower_for: str = "15m"

    # --- KVOffloadTTFTRegression ------------------------------------------------------------------
    ttft_quantile: str = "0.9"
    ttft_smoothing: str = "30m"  # averaging window of the exporter's windowed quantile
    ttft_baseline_offset: str = "1d"  # same time yesterday: diurnal load patterns cancel out
    ttft_regression_ratio: float = 1.5  # 50% slower than the baseline ...
    ttft_regression_min_seconds: float = 0.05  # ... and at least 50 ms slower (tiny models jitter)
    ttft_control_ratio: float = 1.2  # offload target vs a no-offload control serving the same model
    ttft_regression_for: str = "30m"

    # --- KVOffloadMetricsAbsent -------------------------------------------------------------------
    # How long a target is remembered as having had offload series (alert stops after this).
    absent_memory: str = "1d"
    absent_for: str = "10m"

    # --- KVOffloadExporterTargetDown --------------------------------------------------------------
    target_down_for: str = "5m"

    # --- KVOffloadHostMemoryHeadroomLow -----------------------------------------------------------
    # Headroom below this share of the configured (pinned, unreclaimable) tier: an OOM kill is near.
    headroom_min_tier_ratio: float = 0.2
    headroom_for: str = "5m"

    # --- KVOffloadAllocationFailures --------------------------------------------------------------
    # `for` longer than the window: one burst (or a counter reset counted by increase()) that
    # leaves the window before `for` elapses never fires; sustained failures do.
    allocation_window: str = "10m"
    allocation_for: str = "15m"

    # --- KVOffloadCanaryFailing -------------------------------------------------------------------
    canary_window: str = "30m"
    canary_stale_seconds: float = 1800.0  # no successful canary cycle for this long
    canary_for: str = "10m"

    # --- Grafana-managed alerts -------------------------------------------------------------------
    grafana_datasource_uid: str = "prometheus"
    grafana_folder: str = "KV offload"
    grafana_interval: str = "1m"
    runbook_url: str = RUNBOOK_URL

    def fast(self) -> Settings:
        """Second-scale windows and `for` durations for a short end-to-end run against a real Prometheus."""
        return replace(
            self,
            reuse_window="20s",
            store_without_load_min_bytes=1.0,
            store_without_load_for="5s",
            slower_for="5s",
            ttft_smoothing="20s",
            ttft_baseline_offset="30s",
            ttft_regression_for="5s",
            absent_memory="5m",
            absent_for="5s",
            target_down_for="5s",
            headroom_for="5s",
            allocation_window="20s",
            allocation_for="5s",
            canary_window="20s",
            canary_for="15s",
            canary_stale_seconds=30.0,
        )


DEFAULT = Settings()
