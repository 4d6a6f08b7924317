"""The metric names settled before 0.1.0, old -> new, and the naming rule they follow.

Kept as data so that the changelog table, docs/metrics.md and `docs/renames-0.1.0.json` (which another
branch, a dashboard or a rule file can be rewritten with) come from one table. A `{unit}` in a new name is the
value the old series carried in its `unit` label; `{unit_singular}` the same without its plural `s`.
"""

from __future__ import annotations

RENAMES: dict[str, str] = {
    # the exporter's own work and health
    "kvoffload_collector_success": "kvoffload_exporter_collector_success",
    "kvoffload_collector_duration_seconds": "kvoffload_exporter_collector_duration_seconds",
    "kvoffload_poll_duration_seconds": "kvoffload_exporter_poll_duration_seconds",
    "kvoffload_poll_lag_seconds": "kvoffload_exporter_poll_lag_seconds",
    "kvoffload_render_duration_seconds": "kvoffload_exporter_render_duration_seconds",
    "kvoffload_event_loop_lag_seconds": "kvoffload_exporter_event_loop_lag_seconds",
    # no kvoffload_offload_ stutter
    "kvoffload_offload_load_bytes_total": "kvoffload_load_bytes_total",
    "kvoffload_offload_store_bytes_total": "kvoffload_store_bytes_total",
    "kvoffload_offload_load_seconds_total": "kvoffload_load_seconds_total",
    "kvoffload_offload_store_seconds_total": "kvoffload_store_seconds_total",
    "kvoffload_offload_loads_total": "kvoffload_loads_total",
    "kvoffload_offload_stores_total": "kvoffload_stores_total",
    "kvoffload_offload_allocation_failures_total": "kvoffload_allocation_failures_total",
    "kvoffload_offload_stores_skipped_total": "kvoffload_stores_skipped_total",
    "kvoffload_offload_inflight_ratio": "kvoffload_tier_in_flight_ratio",
    "kvoffload_offload_tier_bytes": "kvoffload_tier_bytes",
    "kvoffload_offload_backend_info": "kvoffload_backend_info",
    "kvoffload_offload_load_bandwidth_bytes_per_second": "kvoffload_load_bandwidth_bytes_per_second",
    "kvoffload_offload_store_bandwidth_bytes_per_second": "kvoffload_store_bandwidth_bytes_per_second",
    "kvoffload_offload_recommendation": "kvoffload_recommendation",
    "kvoffload_offload_lookup_async_delay_seconds": "kvoffload_lookup_async_delay_seconds",
    "kvoffload_offload_tier_footprint_ratio": "kvoffload_tier_footprint_ratio",
    # base units: the value is divided by 2^30 x 3600 (a GiB-hour in byte-seconds)
    "kvoffload_offload_payback_seconds_per_gib_hour": "kvoffload_payback_seconds_per_byte_second",
    # the unit label moves into the name: one family per native unit
    **{f"kvoffload_offload_{s}_total": f"kvoffload_backend_{s}_{{unit}}_total" for s in ("stored", "loaded")},
    **{f"kvoffload_offload_{s}_total": f"kvoffload_backend_{s}_{{unit}}_total" for s in ("lookups", "hits")},
    **{f"kvoffload_offload_{s}_total": f"kvoffload_backend_{s}_{{unit}}_total" for s in ("dropped", "cascaded")},
    "kvoffload_offload_promoted_total": "kvoffload_backend_promoted_{unit}_total",
    **{f"kvoffload_offload_{s}": f"kvoffload_backend_{s}_{{unit}}" for s in ("capacity", "in_flight", "used")},
    "kvoffload_offload_unit_bytes": "kvoffload_backend_{unit_singular}_size_bytes",
    # recording rules (with the default window; another `reuse_window` changes the suffix alike)
    "engine:kvoffload_offload_store_bytes:increase1h": "engine:kvoffload_store_bytes:increase1h",
    "engine:kvoffload_offload_load_bytes:increase1h": "engine:kvoffload_load_bytes:increase1h",
    "engine:kvoffload_offload_stored_units:increase1h": "engine:kvoffload_backend_stored_units:increase1h",
    "engine:kvoffload_offload_loaded_units:increase1h": "engine:kvoffload_backend_loaded_units:increase1h",
}
"""Every name renamed before 0.1.0. `kvoffload_up`, `kvoffload_state`, `kvoffload_state_reason`,
`kvoffload_scrape_errors_total`, `kvoffload_targets` and every `kvoffload_canary_*` kept theirs."""

NAMING_RULE: tuple[str, ...] = (
    "Every name starts `kvoffload_`. The exporter's own work and health (build, collectors, polls, merges, "
    "event loop, reloads, listener, guards) is `kvoffload_exporter_*`. A target's poll results, labelled "
    "`target` (`kvoffload_up`, `kvoffload_scrape_*`, `kvoffload_last_success_timestamp_seconds`, "
    "`kvoffload_extra_endpoint_errors_total`, `kvoffload_target_info`), and the target counts "
    "(`kvoffload_targets`, `kvoffload_targets_up`) describe targets and stay beside `kvoffload_up`.",
    "No `kvoffload_offload_`: the prefix already says offload. Families read from a backend's own counters in "
    "its native unit are `kvoffload_backend_*`; vLLM's byte counters and what is derived from them are "
    "`kvoffload_<what>_<unit>`.",
    "The value's unit is the last word of the name before `_total`, in base units: bytes (not GiB), seconds "
    "(not hours), `ratio` for 0-1, a quotient as `<unit>_per_<unit>` (`payback_seconds_per_byte_second`). "
    "A count names what it counts (`_tokens`, `_blocks`, `_chunks`, `_stores`, `_requests`).",
    "A label never carries the unit of a value: a backend counting blocks has its own family "
    "(`kvoffload_backend_stored_blocks_total` beside `..._stored_bytes_total`), so no `sum()` adds blocks to "
    "bytes. `unit` appears only as information: on `kvoffload_source_metric_info` (value 1, which upstream "
    "series a family is read from) and on alerts that say which family fired.",
    "`_total` only on counters; no colons (recording rules only: `engine:<name>:<operation><window>`).",
)
"""The rule every catalogue name follows (docs/metrics.md lists it)."""
