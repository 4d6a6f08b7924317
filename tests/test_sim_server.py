"""The simulator's HTTP API: endpoints, SSE framing, usage, per-request metrics, errors, auth, DP ranks."""

from __future__ import annotations

from typing import Any

import pytest
from support.prom import series

from kvoffload_exporter.canary.wire.protocol import SseReader
from kvoffload_exporter.sim.server import make_app
from kvoffload_exporter.sim.simulator import SimOptions, Simulator

P = list(range(1000, 7000))
SCALE = 0.01  # simulated time runs 100× faster than the wall clock


async def client_for(aiohttp_client: Any, **opts: Any) -> Any:
    sim = Simulator(SimOptions(time_scale=SCALE, seed=3, **opts))
    return await aiohttp_client(make_app(sim))


def stream_body(prompt: Any = P, **extra: Any) -> dict[str, Any]:
    return {"prompt": prompt, "max_tokens": 2, "stream": True, "stream_options": {"include_usage": True}, **extra}


async def events(resp: Any) -> list[Any]:
    """vLLM's framing exactly (`data: ` events, blank-line separated), parsed by the one SSE parser."""
    raw = await resp.read()
    assert raw.endswith(b"data: [DONE]\n\n")
    assert all(c.startswith(b"data: ") for c in raw.split(b"\n\n")[:-1])
    reader = SseReader()
    parsed: list[Any] = reader.feed(raw)
    assert reader.done
    return [*parsed, "[DONE]"]


async def test_plain_endpoints(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client, version="0.32.0")
    assert (await client.get("/health")).status == 200
    assert await (await client.get("/version")).json() == {"version": "0.32.0"}
    models = await (await client.get("/v1/models")).json()
    assert models["data"][0]["id"] == "Qwen/Qwen3-0.6B" and models["data"][0]["max_model_len"] == 8192
    resp = await client.get("/metrics")
    assert resp.headers["Content-Type"] == "text/plain; version=1.0.0; charset=utf-8"
    assert "# TYPE vllm:prompt_tokens_cached_by_source_total counter" in await resp.text()


async def test_streaming_completion_framing_usage_and_metrics(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client)
    resp = await client.post("/v1/completions", json=stream_body(return_token_ids=True))
    assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
    ev = await events(resp)
    first, second, usage, done = ev
    assert first["choices"][0]["text"] and len(first["choices"][0]["token_ids"]) == 1
    assert first["choices"][0]["prompt_token_ids"] == P and "prompt_token_ids" not in second["choices"][0]
    assert second["choices"][0]["finish_reason"] == "length" and done == "[DONE]"
    assert usage["choices"] == [] and usage["usage"]["prompt_tokens"] == 6000
    assert usage["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    assert set(usage["metrics"]) >= {"time_to_first_token_ms", "queue_time_ms", "generation_time_ms"}
    again = await events(await client.post("/v1/completions", json=stream_body()))
    assert again[-2]["usage"]["prompt_tokens_details"] == {"cached_tokens": 5984}
    text = await (await client.get("/metrics")).text()
    assert series(text)["vllm:prefix_cache_hits_total"] == 5984


async def test_non_streaming_body_and_text_prompt(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client)
    body = await (await client.post("/v1/completions", json={"prompt": "w5 w6 w7", "max_tokens": 3})).json()
    assert body["object"] == "text_completion" and body["choices"][0]["finish_reason"] == "length"
    assert len(body["choices"][0]["text"].split()) == 3
    assert body["usage"]["prompt_tokens"] == 3 and body["metrics"]["mean_itl_ms"] > 0


async def test_created_comes_from_the_simulators_wall_clock(aiohttp_client: Any) -> None:
    sim = Simulator(SimOptions(time_scale=SCALE, seed=3), wall=lambda: 1_700_000_000.7)
    client = await aiohttp_client(make_app(sim))
    body = await (await client.post("/v1/completions", json={"prompt": "w5", "max_tokens": 1})).json()
    assert body["created"] == 1_700_000_000


@pytest.mark.parametrize("version,usage_by_default", [("0.17.0", True), ("0.26.0", False)])
async def test_include_usage_default_flipped_at_018(aiohttp_client: Any, version: str, usage_by_default: bool) -> None:
    client = await client_for(aiohttp_client, version=version)
    ev = await events(await client.post("/v1/completions", json={**stream_body(), "stream_options": {}}))
    assert any(isinstance(e, dict) and "usage" in e for e in ev) == usage_by_default


@pytest.mark.parametrize(
    "version,details,metrics", [("0.23.0", False, False), ("0.24.0", True, False), ("0.25.0", True, True)]
)
async def test_usage_details_and_metrics_per_version(
    aiohttp_client: Any, version: str, details: bool, metrics: bool
) -> None:
    client = await client_for(aiohttp_client, version=version)
    body = await (await client.post("/v1/completions", json={"prompt": [5, 6, 7], "max_tokens": 1})).json()
    assert ("prompt_tokens_details" in body["usage"]) == details  # cached_tokens is 0 here
    assert ("metrics" in body) == metrics


async def test_errors_like_vllm(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client, version="0.32.0")
    resp = await client.post("/v1/completions", data=b"{not json", headers={"Content-Type": "application/json"})
    assert resp.status == 400 and (await resp.json())["error"]["code"] == 400
    cases = [
        ({"prompt": P, "stream_options": {"include_usage": True}}, 400),
        ({"prompt": P, "model": "other"}, 404),
        ({"prompt": P, "max_tokens": 5000}, 400),
        ({"prompt": [], "max_tokens": 1}, 400),
        ({"prompt": P, "cache_salt": "a/b"}, 400),
        ({"prompt": P, "cache_salt": ""}, 400),
        ({"max_tokens": 1}, 400),
    ]
    for body, status in cases:
        resp = await client.post("/v1/completions", json=body)
        assert resp.status == status, body
        err = (await resp.json())["error"]
        assert err["code"] == status and err["message"]
    assert (
        await client.post(
            "/v1/completions",
            json={"prompt": [1], "max_tokens": 1, "cache_salt": "a/b"},
            headers={"X-data-parallel-rank": "0"},
        )
    ).status == 400
    old = await client_for(aiohttp_client, version="0.26.0")
    assert (await old.post("/v1/completions", json={"prompt": [1], "max_tokens": 1, "cache_salt": "a/b"})).status == 200


async def test_api_key_guards_v1_only(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client, api_key="sekret")
    assert (await client.get("/v1/models")).status == 401
    assert (await (await client.post("/v1/completions", json={"prompt": [1]})).json()) == {"error": "Unauthorized"}
    assert (await client.get("/v1/models", headers={"Authorization": "bearer sekret"})).status == 200
    for open_path in ("/metrics", "/health", "/version"):
        assert (await client.get(open_path)).status == 200
    old = await client_for(aiohttp_client, api_key="sekret", version="0.10.2")
    assert (await old.get("/v1/models", headers={"Authorization": "bearer sekret"})).status == 401
    assert (await old.get("/v1/models", headers={"Authorization": "Bearer sekret"})).status == 200


async def test_data_parallel_rank_header_pins_an_engine(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client, engines=2)
    for _ in range(2):
        resp = await client.post(
            "/v1/completions", json={"prompt": P, "max_tokens": 1}, headers={"X-data-parallel-rank": "1"}
        )
        assert resp.status == 200
    text = await (await client.get("/metrics")).text()
    assert 'vllm:prefix_cache_hits_total{engine="1",model_name="Qwen/Qwen3-0.6B"} 5984.0' in text
    assert 'vllm:prefix_cache_queries_total{engine="0",model_name="Qwen/Qwen3-0.6B"} 0.0' in text
    bad = await client.post(
        "/v1/completions", json={"prompt": P, "max_tokens": 1}, headers={"X-data-parallel-rank": "2"}
    )
    assert bad.status == 400


async def test_kv_transfer_params_without_connector_is_accepted(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client, connector=False)
    resp = await client.post(
        "/v1/completions", json={"prompt": P, "max_tokens": 1, "kv_transfer_params": {"max_load_tokens": 0}}
    )
    assert resp.status == 200
    assert "vllm:kv_offload" not in await (await client.get("/metrics")).text()


async def test_admin_state_reports_tier_occupancy(aiohttp_client: Any) -> None:
    client = await client_for(aiohttp_client)
    await client.post("/v1/completions", json={"prompt": P, "max_tokens": 1})
    state = await (await client.get("/_sim/state")).json()
    assert state["engines"][0]["cpu_chunks_used"] == 93 and state["engines"][0]["cpu_chunks"] == 1089
