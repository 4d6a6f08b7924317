"""The real vLLM servers behave as the rest of the e2e suite assumes (endpoints, families, block-sized stores)."""

from __future__ import annotations

import random

import pytest

from . import client
from .vllm_server import BLOCK_TOKENS, KV_BYTES_PER_TOKEN, VLLM_VERSION

STORE = "vllm:kv_offload_store_bytes_total"

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("which", ["vllm_plain", "vllm_offload"])
def test_endpoints(which: str, request: pytest.FixtureRequest) -> None:
    server = request.getfixturevalue(which)
    assert client.get(server.url, "/health")[0] == 200
    assert client.get_json(server.url, "/version") == {"version": VLLM_VERSION}
    models = client.get_json(server.url, "/v1/models")
    assert [m["id"] for m in models["data"]] == [client.MODEL]


def test_offload_families_only_on_offload_server(vllm_plain, vllm_offload) -> None:
    offload = client.metrics(vllm_offload.url)
    assert client.has_help_and_type(offload, STORE)
    plain = client.metrics(vllm_plain.url)
    assert not [f for f in client.families(plain) if f.startswith("vllm:kv_offload_")]
    assert client.has_help_and_type(plain, "vllm:prefix_cache_queries_total")


def test_cold_prompt_stores_its_full_blocks(vllm_offload) -> None:
    url = vllm_offload.url
    before = client.metrics(url)
    prompt = client.prompt_ids(2000, random.Random("test_cold_prompt_stores_its_full_blocks"))
    done = client.complete(url, prompt, max_tokens=1)
    assert done.usage["prompt_tokens"] == 2000
    assert done.cached_tokens == 0
    client.settle(url)
    after = client.metrics(url)

    # 2000 tokens = 15 full blocks of 128 (the partial 16th is not offloaded) x 1 KiB per token.
    expected = (2000 // BLOCK_TOKENS) * BLOCK_TOKENS * KV_BYTES_PER_TOKEN
    assert expected == 1_966_080  # the number measured in real-runs.md section 2
    assert client.total(after, STORE) - client.total(before, STORE) == expected
    # The deprecated mirror counts the same bytes.
    legacy = "vllm:kv_offload_total_bytes_total"
    assert (
        client.total(after, legacy, transfer_type="GPU_to_CPU")
        - client.total(before, legacy, transfer_type="GPU_to_CPU")
    ) == expected
    assert client.total(after, "vllm:kv_offload_load_bytes_total") == client.total(
        before, "vllm:kv_offload_load_bytes_total"
    )


def test_plain_server_prefix_hit(vllm_plain) -> None:
    url = vllm_plain.url
    prompt = client.prompt_ids(2000, random.Random("test_plain_server_prefix_hit"))
    before = client.metrics(url)
    assert client.complete(url, prompt).cached_tokens == 0
    assert client.complete(url, prompt).cached_tokens == 1920  # 15 full blocks of 128
    after = client.metrics(url)
    hits = "vllm:prefix_cache_hits_total"
    assert client.total(after, hits) - client.total(before, hits) == 1920
    assert not [f for f in client.families(after) if f.startswith("vllm:kv_offload_")]
