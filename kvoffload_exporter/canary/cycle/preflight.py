"""Preflight: health, models, version and a `/metrics` snapshot of the target (and control), then
the plan — what a cycle will send. Failures are `CanaryError` with a closed reason."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvoffload_exporter.canary.cycle import plan as planning
from kvoffload_exporter.canary.cycle.records import CONTROL, TARGET, Conditions, ServerInfo
from kvoffload_exporter.canary.types import Strategy
from kvoffload_exporter.canary.wire.errors import CanaryError, CycleFailed
from kvoffload_exporter.canary.wire.protocol import parse_models

if TYPE_CHECKING:
    from kvoffload_exporter.canary.cycle.context import RunContext


async def server_info(e: RunContext, role: str, same_as: ServerInfo | None = None) -> ServerInfo:
    """One server's facts; a control (`same_as` the target) must serve the target's model."""
    url = e.url_of(role)
    status, body = await e.client.get(url, "/health")
    if status != 200:
        raise CanaryError(
            "health", f"{url}/health " + (f"answered HTTP {status}" if status is not None else str(body)), role
        )
    status, body = await e.client.get(url, "/v1/models")
    if status == 401:  # a key was sent: it is wrong, not missing
        problem = "rejected the API key (401): check" if getattr(e.client, "has_api_key", False) else "needs an API key"
        raise CanaryError(
            "auth",
            f"{url}/v1/models {problem} (--api-key-file, serve --canary.api-key-file, or ${e.settings.api_key_env})",
            role,
        )
    models = parse_models(body) if status == 200 else None
    if not models or not models.ids:
        raise CanaryError("models", f"{url}/v1/models answered {status} without models", role)
    if same_as is not None and same_as.model not in models.ids:
        raise CanaryError(
            "model_mismatch",
            f"the control target {url} serves {', '.join(map(repr, models.ids))}, the target {same_as.url} serves "
            f"{same_as.model!r}: a control must serve the same model",
            role,
        )
    wanted = same_as.model if same_as is not None else e.settings.model
    model = wanted if wanted in models.ids else models.ids[0]
    if wanted and wanted not in models.ids and role == TARGET:
        raise CanaryError("models", f"model {wanted!r} not served by {url} ({models.ids})")
    version = await e.client.version(url)
    try:
        snap = await e.scrapes.scrape(role, keep_first=True)
    except CycleFailed as err:
        raise CanaryError("metrics", err.detail, role) from None
    eng = next((x for x in snap.engines if x.model_name == model), snap.engines[0] if snap.engines else None)
    return ServerInfo(
        url=url,
        version=version,
        model=model,
        max_model_len=models.max_model_len.get(model),
        generation=snap.generation,
        cache_config=dict(eng.cache_config) if eng else {},
        offload_config=dict(eng.offload_config) if eng else {},
    )


async def conditions(e: RunContext) -> Conditions:
    """Both servers' facts and the sizes of this target's prompts."""
    target = await server_info(e, TARGET)
    control = await server_info(e, CONTROL, same_as=target) if e.control_url else None
    snap = e.scrapes.last(TARGET)
    if snap is None:  # server_info(TARGET) always leaves one
        raise CanaryError("metrics", f"{target.url}/metrics: no snapshot")
    eng = next((x for x in snap.engines if x.model_name == target.model), None)
    facts = planning.CacheFacts.from_engine(eng, target.max_model_len, snap.offload_configured)
    s = e.settings
    strategy = Strategy(s.effective_strategy)
    # Pressure seeds B after A's GPU revisit, so only one prefix must fit; the wait strategy keeps
    # A and B resident together until traffic evicts them.
    resident = 2 if strategy == Strategy.WAIT and e.state.uses_recompute() else 1
    try:
        sizing = planning.size(facts, s.prefix_tokens, s.chunk_tokens, s.filler_tokens, resident=resident)
    except planning.PlanError as err:
        raise CanaryError("plan", str(err)) from None
    if strategy == Strategy.PRESSURE and not sizing.filler_count:
        raise CanaryError("plan", "pressure needs num_gpu_blocks and block_size from vllm:cache_config_info")
    if control and control.max_model_len and control.max_model_len <= sizing.prompt_tokens:
        raise CanaryError("plan", f"control target max_model_len {control.max_model_len} is too short", CONTROL)
    return Conditions(target, control, facts, sizing, strategy, e.prompts.fingerprint)
