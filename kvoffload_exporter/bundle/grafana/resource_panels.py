"""The overview's resource rows: host RAM and VRAM against the tier, and what each engine's caches hold in
tokens (for routers, autoscalers and sizing) with the configuration warnings known from the first poll."""

from __future__ import annotations

import grafanalib.core as G

from kvoffload_exporter.bundle.grafana.panels import Ctx, Layout, stat, targets, timeseries


def memory_row(L: Layout, c: Ctx, eng: str) -> None:
    """Host RAM headroom against the tier, VRAM per GPU."""
    q = c.q
    L.row("Memory")
    L.add(
        timeseries(
            "Host RAM headroom vs configured tier",
            "Memory that can still be allocated (min of host available "
            "and cgroup limit − usage) next to the pinned offload tier configured on that host. Headroom far "
            "below the tier means a restart that re-pins it, or any spike, risks an OOM kill.",
            [
                (c.per_exporter(q("kvoffload_host_memory_headroom_bytes")), "headroom {{instance}}"),
                (c.per_exporter(q("kvoffload_host_memory_available_bytes")), "available {{instance}}"),
                (f"sum by (job, instance) ({q('kvoffload_tier_bytes')})", "configured tier {{instance}}"),
            ],
            "bytes",
        ),
        w=12,
        h=8,
    )
    vram = f"{q('kvoffload_gpu_memory_used_bytes')} / {q('kvoffload_gpu_memory_total_bytes')}"
    L.add(
        G.GaugePanel(
            title="VRAM used per GPU",
            description="Framebuffer used ÷ total per GPU (NVML) on the exporters of the selected targets.",
            targets=targets([(c.per_exporter(vram), "GPU {{gpu}} {{name}}")], instant=True),
            format="percentunit",
            min=0,
            max=1,
            calc="lastNotNull",
            thresholdMarkers=True,
        ),
        w=6,
        h=8,
        steps=[("green", None), ("orange", 0.9), ("red", 0.97)],
    )
    L.add(
        timeseries(
            "VRAM per GPU",
            "Framebuffer used and total per GPU (NVML).",
            [
                (c.per_exporter(q("kvoffload_gpu_memory_used_bytes")), "used GPU {{gpu}}"),
                (c.per_exporter(q("kvoffload_gpu_memory_total_bytes")), "total GPU {{gpu}}"),
            ],
            "bytes",
            fill=0,
        ),
        w=6,
        h=8,
    )


def capacity_row(L: Layout, c: Ctx, eng: str) -> None:
    """What each engine's caches hold in tokens (routers, autoscalers, sizing) and the configuration warnings."""
    q = c.q
    L.row("Capacity")
    L.add(
        timeseries(
            "KV capacity by tier (tokens)",
            "Tokens each cache holds, per engine (data-parallel rank): gpu = num_gpu_blocks × block_size, cpu = the "
            "offload tier's own token count (kv_offload_config_info, vLLM 0.33+) or its bytes over the KV bytes per "
            "token (basis label). Effective = their sum, an upper bound (the tier also holds copies of GPU blocks); "
            "recorded as target:kvoffload_effective_kv_capacity_tokens:sum for routers.",
            [
                (q("kvoffload_kv_capacity_tokens"), f"{eng} {{{{tier}}}}"),
                (q("kvoffload_effective_kv_capacity_tokens"), f"{eng} effective"),
            ],
            "suffix: tokens",
        ),
        w=16,
        h=8,
    )
    L.add(
        stat(
            "Configuration warnings",
            "Engines whose configuration alone says a tier cannot pay off, known from the first poll before any "
            "traffic: tier_smaller_than_gpu_pool (a tier holding fewer tokens than the GPU pool loses a prefix "
            "before the GPU does). The state reason of the same name follows once traffic shows it.",
            [(f"sum by (job, instance, warning) ({q('kvoffload_config_warning')})", "{{instance}} {{warning}}")],
            "none",
            color_mode="background",
            mappings=[],
        ),
        w=8,
        h=8,
        steps=[("green", None), ("orange", 1)],
    )


__all__ = ["capacity_row", "memory_row"]
