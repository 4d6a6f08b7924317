"""The runbook's "Reason" sections: how to read each `kvoffload_state_reason` and what to do about it.

Pure text, one section per `StateReason` (the rule itself lives in kvoffload_exporter/derive/reasons.py); appended to
alerts/runbook.md by bundle/texts/runbook.py (below the alert sections, one heading level down, so the
"one `##` section per alert" check holds); KVOffloadStoreWithoutLoad's description points here when the
alert carries a `reason` label. tests/test_reasons.py checks the runbook holds every section.
"""

from __future__ import annotations

from kvoffload_exporter.derive.reasons import RULES_BY_STATE
from kvoffload_exporter.enums import StateReason

_HEAD = """### State reasons

`kvoffload_state_reason{target,model_name,engine,window,reason}` is one-hot: 1 on the reason whose rule
holds for an engine in `store_without_load` or `not_storing` (or `stores_dropped` for a degraded `hit`), all
0 when nothing needs explaining. `inspect BEFORE AFTER` prints it (`state_reason` in `--json`);
KVOffloadStoreWithoutLoad and KVOffloadNotStoring carry it as their `reason` label. Each state has its
own rules ({rules}),
tried in the order below; the first that holds wins, so a missing metric is never read as a property of
the workload. The three canary-backed facts (wait-ladder
evictions, revisits that never load) sharpen `lookup_always_misses` into `evicted_before_reuse`.
"""

SECTIONS: dict[StateReason, tuple[str, str, str]] = {
    StateReason.METRIC_MISSING: (
        "The engine exports store counters but no load family (`vllm:kv_offload_load_*`: no HELP, TYPE or "
        "sample), or external prefix queries without external hits (ai-dynamo/dynamo#4549). Loads may "
        "happen and simply be invisible.",
        "`inspect` one dump: which `vllm:kv_offload_*` families exist; the vLLM / connector version.",
        "Upgrade or configure the connector so it exports loads; until then the state proves nothing.",
    ),
    StateReason.WARMING_UP: (
        "Fewer prompt tokens since the engine started than `num_gpu_blocks × block_size`. With "
        "store-on-compute the tier is a superset of the GPU cache (vllm#43946): nothing stored has left "
        "the GPU yet, so nothing can be loaded back.",
        "`kvoffload_prompt_tokens_total` against `kvoffload_gpu_kv_cache_blocks × kvoffload_gpu_kv_block_size_tokens`.",
        "Wait; the reason clears once the GPU pool has turned over once.",
    ),
    StateReason.TIER_SMALLER_THAN_PREFIX: (
        "`not_storing`: the tier's known size (`kvoffload_tier_bytes`, exported or the target's "
        "`tier_bytes` setting) is below the KV bytes of the typical computed prompt (computed prompt tokens "
        "per request × KV bytes per token). A store that cannot fit is never made, so the tier stays empty "
        "(H200, Qwen3-0.6B: a 300 MB tier under 5,120-token prefixes of 587 MB stored nothing in 12 million "
        "computed tokens).",
        "`kvoffload_tier_bytes` against the prompt lengths the engine computes; the connector's "
        "`cpu_bytes_to_use` / `kv_offloading_size`.",
        "Make the tier several prompts large (and larger than the GPU pool), or disable it: at this size it "
        "costs pinned memory and can never help.",
    ),
    StateReason.STORES_SKIPPED: (
        "`not_storing`: the connector counted stores it skipped (`vllm:kv_offload_stores_skipped`) and made "
        "none: the tier refuses what it is offered (full of in-flight chunks, or a store policy that skips).",
        "`kvoffload_stores_skipped_total`; the tier size and `store_threshold`.",
        "Enlarge the tier or relax the store policy; until then the tier holds nothing.",
    ),
    StateReason.STORE_ERRORS: (
        "`not_storing`: the store answered every put of the window with an error, whole or in part "
        '(MooncakeStoreConnector `vllm:mooncake_store_operation_total{operation="save_put",status="error"}` '
        'or `status="partial_failure"`), so no put was stored whole. vLLM still adds a failing put\'s whole '
        "batch to `vllm:mooncake_store_operation_bytes_total{status=...}`; the exporter never counts those as stored.",
        '`kvoffload_backend_dropped_stores_total{reason="store_error"}`; the store\'s master and its segments '
        "(are they mounted, full, reachable), the transfer engine's protocol and devices.",
        "Fix the store (a larger tier does not help): until a put succeeds the tier holds nothing.",
    ),
    StateReason.STORES_DROPPED: (
        "The tier is losing stores: allocation failures, stores skipped, a backend's own drops (tiering "
        "backpressure, a full SimpleCPU tier), or every chunk pinned by in-flight transfers (backpressure). "
        "On a `hit` engine this is the degraded hit: it loads, but not all it could.",
        "`kvoffload_allocation_failures_total`, `kvoffload_stores_skipped_total`, "
        "`kvoffload_backend_dropped_*_total`, `kvoffload_tier_in_flight_ratio` near 1.",
        "Enlarge the tier or lower the store rate (`store_threshold` ≥ 2 stores only reused blocks).",
    ),
    StateReason.TIER_SMALLER_THAN_GPU_POOL: (
        "The tier holds fewer tokens (`kv_offload_config_info` `cpu_kv_cache_size_tokens`, or the tier bytes "
        "over the GPU cache's bytes per token) than the GPU pool. A prefix is evicted from the GPU only "
        "after newer blocks filled it, and those newer blocks already pushed it out of the smaller tier "
        "(vllm#56871: 500 GiB of host held 3.3 M tokens under a 5.29 M-token GPU pool).",
        "`kvoffload_tier_bytes` against the GPU pool; the tier size per TP rank.",
        "Make the tier clearly larger than the GPU pool, or disable offload: at this size it cannot hit.",
    ),
    StateReason.PREFIX_SHORTER_THAN_BLOCK: (
        "The GPU prefix hits per request are shorter than one offload chunk (`cpu_blocks_per_chunk × "
        "block_size`): the GPU matches 16-token blocks, the tier only whole chunks, so shared prefixes "
        "never reach it (vllm#54607).",
        "GPU hit tokens ÷ requests (TTFT count) against the chunk size in `kv_offload_config_info`.",
        "Use a smaller offload block size, or accept that this workload's prefixes are too short to offload.",
    ),
    StateReason.LOADS_SKIPPED_BY_REQUEST: (
        "Fewer than half of the prompt tokens were looked up in the prefix cache: requests skip reading "
        "the cache (prompt logprobs, `kv_transfer_params.max_load_tokens: 0`, router policies such as "
        "llm-d-router#2833; vllm#57596).",
        "`kvoffload_gpu_prefix_queries_tokens_total` against `kvoffload_prompt_tokens_total`; the clients' "
        "request options.",
        "If the skip is intended (selective loading), the stores are wasted: stop offloading those "
        "requests' blocks or raise `store_threshold`.",
    ),
    StateReason.EVICTED_BEFORE_REUSE: (
        "The canary's wait ladder saw its displaced prefix miss the tier although this target has loaded "
        "before: real reuse comes later than the tier keeps blocks.",
        "`kvoffload_tier_retention_seconds` (how long the tier keeps a prefix) against the workload's "
        'revisit interval; `kvoffload_canary_cycles_total{reason="evicted_from_tier"}`.',
        "Grow the tier until the retention horizon covers the revisit interval, or disable it.",
    ),
    StateReason.NO_REUSE_IN_WORKLOAD: (
        "The GPU prefix hit ratio is below 5 % and nothing came from the tier: the workload barely repeats "
        "prefixes, so stores are pure cost.",
        "*GPU vs external prefix hit ratio* over a day: is it always this low?",
        "Set `store_threshold` ≥ 2 (only reused blocks are stored) or disable offloading for this model.",
    ),
    StateReason.SERVED_BY_ANOTHER_CONNECTOR: (
        "The engine's external prefix hits grew in the window while this tier loaded nothing: the prefixes came "
        "from another connector, typically the other child of a MultiConnector (a shared store or a connector "
        "that exports no metrics). This tier keeps storing what it never serves.",
        "`kvoffload_prompt_tokens_cached_by_source_total{source}` (or `inspect --json`'s `served_by`) names "
        "the source where vLLM reports it; the MultiConnector's `kv_connector_extra_config` lists the children.",
        "Remove the idle tier from the MultiConnector (it costs host RAM and store bandwidth), or order the "
        "children so that it is asked first.",
    ),
    StateReason.PROMOTION_FAILURES: (
        "A secondary tier of a tiering spec (`fs`, `p2p`, `obj`) finds the chunks a request asks for (its "
        "`vllm:kv_offload_tiering_chunk_hits` grow) but promoting them into the CPU primary tier fails "
        "(`vllm:kv_offload_tiering_promotion_job_failures` or `promotion_allocation_failures` grow), and "
        "nothing is loaded: the tier holds the prefix and cannot serve it. Before vLLM 0.34 this read as "
        "`lookup_always_misses`.",
        "`kvoffload_tier_promotion_failures_total{tier}`, "
        '`kvoffload_backend_dropped_promotions_total{reason="promotion_allocation_failure"}`, '
        '`kvoffload_tier_promotions_total{result="failure"}`; on a P2P tier '
        "`kvoffload_tier_deferred_release_chunks{tier}` (chunks held back after failed promotions); the tier's "
        "own logs (files, peers, object store).",
        "Fix the secondary tier's I/O (mount, permissions, peers reachable) or free primary-tier space for "
        "promotions; a larger secondary tier does not help. `check` stops early with `check_connector` (exit 3).",
    ),
    StateReason.LOAD_ERRORS: (
        "The store finds the keys (external prefix queries and hits grow) but its gets fail, whole or in part "
        '(MooncakeStoreConnector `vllm:mooncake_store_operation_total{operation="load_get",status="error"}` or '
        '`status="partial_failure"`, `vllm:mooncake_store_operation_failed_keys_total{operation="load_get"}`), '
        "while puts succeed: every failed key is recomputed. Before this reason it read as "
        "`served_by_another_connector`.",
        "`kvoffload_backend_load_failed_keys_total`, `kvoffload_backend_load_failed_operations_total`, "
        '`kvoffload_backend_operation_seconds_total{operation="load_get"}`; the store\'s master, segments and '
        "transfer engine.",
        "Fix the store's read path (segments evicted or unreachable, transfer engine protocol); a larger tier does "
        "not help. `check` stops early with `check_connector` (exit 3).",
    ),
    StateReason.LOOKUP_ALWAYS_MISSES: (
        "The tier is asked (external prefix queries grow) and never answers (external hits stay 0), or "
        "the canary's displaced prefix was not loaded on revisit on a target that never loaded: the "
        "load path is broken (vllm#47890 hybrid KV groups, vllm#53498 SimpleCPU).",
        "`kvoffload-exporter check` against the target: a `no_load` cycle reason confirms it.",
        "Compare the vLLM version with the known issues; check `kv_connector_extra_config`; disable "
        "offload until fixed.",
    ),
}


def _rules() -> str:
    """`state`: its reasons in the order they are tried, for each state that has rules (derive.reasons)."""
    return "; ".join(
        f"`{state}`: " + ", ".join(f"`{reason}`" for reason, _ in rules) for state, rules in RULES_BY_STATE.items()
    )


def render() -> str:
    """The Markdown appended to alerts/runbook.md: one section per `StateReason`, in enum order (a reason
    without a section fails the build)."""
    parts = [_HEAD.replace("{rules}", _rules())]
    for reason in StateReason:
        meaning, check, act = SECTIONS[reason]
        parts.append(f"#### Reason {reason}\n\n**Meaning.** {meaning}\n\n**Check.** {check}\n\n**Act.** {act}\n")
    return "\n".join(parts)


__all__ = ["SECTIONS", "render"]
