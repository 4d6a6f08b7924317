#!/usr/bin/env python3
"""Local stand-in for `vllm serve` (vLLM 0.26.0 metric names), for testing devrun.py without a GPU.

    python3 mock_vllm.py PORT PHASE [SERVED_NAME]      PHASE A = with a CPU tier, B = without

A tiny cache model: GPU prefix cache of 640 blocks x 16 tokens (LRU), and in phase A a CPU tier of 64-token
chunks (1,089 chunks). Prompts must be token-id lists. Endpoints: /health /version /v1/models /metrics
/v1/completions (streaming, usage with prompt_tokens_details.cached_tokens, per-request metrics).
MOCK_FAIL_FIRST=PORT plus MOCK_FLAG_DIR: the first start on that port exits at once (tests fallbacks).
Needs aiohttp (the project's dev environment has it).
"""

import asyncio
import collections
import hashlib
import json
import os
import sys
import time

from aiohttp import web

PORT = int(sys.argv[1])
PHASE = sys.argv[2].upper()
SERVED = sys.argv[3] if len(sys.argv) > 3 else "Qwen/Qwen3-0.6B"
if os.environ.get("MOCK_FAIL_FIRST") == str(PORT):
    flag = os.path.join(os.environ.get("MOCK_FLAG_DIR", "/tmp"), f"mock_failed_{PORT}")
    if not os.path.exists(flag):
        open(flag, "w").close()
        print("mock: simulated start failure (torch.OutOfMemoryError: CUDA out of memory)", flush=True)
        sys.exit(1)

GPU_BLOCKS, BLOCK, CHUNK, CPU_CHUNKS = 640, 16, 64, 1089
BYTES_PER_TOKEN = 114688 if "0.6B" in SERVED else 262144
gpu = collections.OrderedDict()  # block hash -> None (LRU)
cpu = collections.OrderedDict()  # chunk hash -> None (LRU)
c = collections.Counter()
ttft = []


def hashes(tokens, size, salt):
    h, out = hashlib.sha256((salt or "").encode()), []
    for i in range(0, len(tokens) - len(tokens) % size, size):
        h.update(json.dumps(tokens[i : i + size]).encode())
        out.append(h.hexdigest())
    return out


def process(tokens, salt):
    n = len(tokens)
    gb = hashes(tokens, BLOCK, salt)
    g = 0
    while g < len(gb) and gb[g] in gpu and (g + 1) * BLOCK < n:
        g += 1
    gpu_hit = g * BLOCK
    ext_hit, load = 0, 0
    c["q"] += n
    c["h"] += gpu_hit
    c["eq"] += n - gpu_hit
    if PHASE == "A":
        ch = hashes(tokens, CHUNK, salt)
        k = 0
        while k < len(ch) and ch[k] in cpu and (k + 1) * CHUNK < n:
            k += 1
        if k * CHUNK > gpu_hit:
            ext_hit = k * CHUNK - gpu_hit
            load = ext_hit * BYTES_PER_TOKEN
            c["eh"] += ext_hit
            c["load"] += load
        new = [x for x in ch if x not in cpu]
        for x in ch:
            cpu[x] = None
            cpu.move_to_end(x)
        while len(cpu) > CPU_CHUNKS:
            cpu.popitem(last=False)
        c["store"] += len(new) * CHUNK * BYTES_PER_TOKEN
    for x in gb:
        gpu[x] = None
        gpu.move_to_end(x)
    while len(gpu) > GPU_BLOCKS:
        gpu.popitem(last=False)
    c["src_hit"] += gpu_hit
    c["src_ext"] += ext_hit
    c["src_comp"] += n - gpu_hit - ext_hit
    c["prompt"] += n
    return gpu_hit + ext_hit, ext_hit


async def health(_r):
    return web.Response(text="")


async def version(_r):
    return web.json_response({"version": "0.26.0-mock"})


async def models(_r):
    return web.json_response({"object": "list", "data": [{"id": SERVED, "object": "model"}]})


async def metrics(_r):
    lab = f'engine="0",model_name="{SERVED}"'
    lines = [
        "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.",
        "# TYPE vllm:prefix_cache_queries_total counter",
        f"vllm:prefix_cache_queries_total{{{lab}}} {float(c['q'])}",
        "# TYPE vllm:prefix_cache_hits_total counter",
        f"vllm:prefix_cache_hits_total{{{lab}}} {float(c['h'])}",
        "# TYPE vllm:external_prefix_cache_queries_total counter",
        f"vllm:external_prefix_cache_queries_total{{{lab}}} {float(c['eq'] if PHASE == 'A' else 0)}",
        "# TYPE vllm:external_prefix_cache_hits_total counter",
        f"vllm:external_prefix_cache_hits_total{{{lab}}} {float(c['eh'])}",
        "# TYPE vllm:prompt_tokens_total counter",
        f"vllm:prompt_tokens_total{{{lab}}} {float(c['prompt'])}",
        "# TYPE vllm:prompt_tokens_by_source_total counter",
        f'vllm:prompt_tokens_by_source_total{{{lab},source="local_cache_hit"}} {float(c["src_hit"])}',
        f'vllm:prompt_tokens_by_source_total{{{lab},source="external_kv_transfer"}} {float(c["src_ext"])}',
        f'vllm:prompt_tokens_by_source_total{{{lab},source="local_compute"}} {float(c["src_comp"])}',
        "# TYPE vllm:kv_cache_usage_perc gauge",
        f"vllm:kv_cache_usage_perc{{{lab}}} {len(gpu) / GPU_BLOCKS}",
        "# TYPE vllm:cache_config_info gauge",
        (
            'vllm:cache_config_info{block_size="16",kv_cache_size_tokens="10240",num_gpu_blocks="640",'
            'num_cpu_blocks="None",engine="0"} 1.0'
        ),
        "# TYPE vllm:time_to_first_token_seconds histogram",
    ]
    cum = 0
    for le in (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5):
        cum = sum(1 for t in ttft if t <= le)
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{{lab},le="{le}"}} {float(cum)}')
    lines.append(f'vllm:time_to_first_token_seconds_bucket{{{lab},le="+Inf"}} {float(len(ttft))}')
    lines.append(f"vllm:time_to_first_token_seconds_count{{{lab}}} {float(len(ttft))}")
    lines.append(f"vllm:time_to_first_token_seconds_sum{{{lab}}} {sum(ttft)}")
    if PHASE == "A":
        lines += [
            "# TYPE vllm:kv_offload_load_bytes_total counter",
            f"vllm:kv_offload_load_bytes_total{{{lab}}} {float(c['load'])}",
            "# TYPE vllm:kv_offload_store_bytes_total counter",
            f"vllm:kv_offload_store_bytes_total{{{lab}}} {float(c['store'])}",
            "# TYPE vllm:kv_offload_total_bytes_total counter",
            f'vllm:kv_offload_total_bytes_total{{{lab},transfer_type="CPU_to_GPU"}} {float(c["load"])}',
            f'vllm:kv_offload_total_bytes_total{{{lab},transfer_type="GPU_to_CPU"}} {float(c["store"])}',
        ]
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")


async def completions(r):
    b = await r.json()
    toks = b.get("prompt")
    if not isinstance(toks, list) or not toks or not all(isinstance(t, int) for t in toks):
        return web.json_response({"error": {"message": "token-id prompts only (--skip-tokenizer-init)"}}, status=400)
    t0 = time.perf_counter()
    cached, ext = process(toks, b.get("cache_salt"))
    computed = len(toks) - cached
    await asyncio.sleep(0.002 + computed * 2e-6 + ext * 3e-6)
    resp = web.StreamResponse()
    resp.content_type = "text/event-stream"
    await resp.prepare(r)
    first = {
        "id": "cmpl-mock",
        "object": "text_completion",
        "model": SERVED,
        "choices": [{"index": 0, "text": " x", "finish_reason": "length"}],
    }
    await resp.write(("data: " + json.dumps(first) + "\n\n").encode())
    dt = time.perf_counter() - t0
    ttft.append(dt)
    u = {
        "id": "cmpl-mock",
        "object": "text_completion",
        "model": SERVED,
        "choices": [],
        "usage": {
            "prompt_tokens": len(toks),
            "completion_tokens": 1,
            "total_tokens": len(toks) + 1,
            "prompt_tokens_details": {"cached_tokens": cached},
        },
        "metrics": {"time_to_first_token_ms": round(dt * 1e3, 3), "queue_time_ms": 0.02},
    }
    await resp.write(("data: " + json.dumps(u) + "\n\n").encode())
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


app = web.Application(client_max_size=64 * 1024 * 1024)
app.add_routes(
    [
        web.get("/health", health),
        web.get("/version", version),
        web.get("/v1/models", models),
        web.get("/metrics", metrics),
        web.post("/v1/completions", completions),
    ]
)
print(f"mock vLLM phase {PHASE} {SERVED} on :{PORT}", flush=True)
time.sleep(float(os.environ.get("MOCK_START_DELAY", "1")))
web.run_app(app, host="127.0.0.1", port=PORT, print=None)
