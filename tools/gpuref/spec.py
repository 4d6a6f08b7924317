"""The GPU reference run as data: model shapes, the two servers, and the product's command lines.

Pure and stdlib only, so `run.py`, the rehearsal and the tests read one definition. Server A serves the
shape with vLLM's OffloadingConnector CPU tier, server B is the same engine without a connector (the
control); the product's `check` measures A against B, `serve` watches both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Shape:
    """A model shape (config.json only: dummy weights) and how the simulator imitates it in a rehearsal."""

    config_dir: str  # folder under tools/gpuref/
    served: str
    cpu_bytes: int  # cpu_bytes_to_use of A's CPU tier
    gpu_util: float  # --gpu-memory-utilization of each server (A and B share the GPUs)
    calibration: str  # `simulate --calibration`
    kv_bytes_per_token: int  # 2 (K, V) x layers x KV heads x head_dim x 2 B (bf16)
    parallel: tuple[str, ...] = ()  # vLLM's data- or tensor-parallel flags
    gpus: int = 1
    sim_engines: int = 1  # data-parallel ranks show up as separate engines in /metrics


@dataclass(frozen=True)
class Server:
    role: str  # "A": with the CPU tier, "B": the control without a connector
    port: int

    @property
    def connector(self) -> bool:
        return self.role == "A"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass(frozen=True)
class Sweep:
    """The product's load sweep: `check --concurrency LEVELS --min-bursts N --rounds R`."""

    levels: str = "1,4,16,32"
    min_bursts: int = 10
    rounds: int = 10
    min_samples: int = 10
    settle_s: float | None = None  # check --settle; None: the product's default


QWEN3_06B = 2 * 28 * 8 * 128 * 2
QWEN3_14B = 2 * 40 * 8 * 128 * 2
QWEN3_32B = 2 * 64 * 8 * 128 * 2

_06B = Shape("model-0.6b", "Qwen/Qwen3-0.6B", 8_000_000_000, 0.4, "h200-qwen3-0.6b", QWEN3_06B)
SHAPES = {
    "0.6b": _06B,
    "14b": Shape("model-14b", "Qwen/Qwen3-14B", 16_000_000_000, 0.45, "h200-qwen3-0.6b", QWEN3_14B),
    "32b": Shape("model-32b", "Qwen/Qwen3-32B", 16_000_000_000, 0.49, "h200-qwen3-32b", QWEN3_32B),
    # Two GPUs: both servers span both, as the one-GPU shapes share one. Data-parallel ranks are separate
    # engines in /metrics (the simulator's --engines 2); tensor-parallel ranks are one engine.
    "dp2": replace(_06B, parallel=("--data-parallel-size", "2"), gpus=2, sim_engines=2),
    "tp2": replace(_06B, parallel=("--tensor-parallel-size", "2"), gpus=2),
}

# Engine flags of both servers; A adds --kv-transfer-config. A 10,240-token GPU cache (640 x 16) so that a
# few fillers displace the canary's prefix; --max-num-seqs above the largest sweep level.
DUMMY_WEIGHTS = ("--load-format", "dummy")  # left out when the run serves seeded weights (weights.py)
VLLM_FLAGS = (
    "--skip-tokenizer-init",
    "--enforce-eager",
    "--max-model-len",
    "8192",
    "--block-size",
    "16",
    "--num-gpu-blocks-override",
    "640",
)
VLLM_REQUEST_FLAGS = ("--enable-prompt-tokens-details", "--enable-per-request-metrics")
VLLM_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_USE_FLASHINFER_SAMPLER": "0",  # the sampler would import FlashInfer, which the offline bundle omits
    "VLLM_LOGGING_LEVEL": "INFO",
    "TOKENIZERS_PARALLELISM": "false",
}
MULTI_GPU_ENV = {"NCCL_NVLS_ENABLE": "0"}  # no NVLink multicast: not needed, and risky on shared hosts
OFFLOAD_BLOCK_TOKENS = 64
MAX_NUM_SEQS = 64

SERVERS = (Server("A", 8000), Server("B", 8001))
EXPORTER_PORT = 9400


def kv_transfer_config(shape: Shape) -> str:
    cfg = {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"block_size": OFFLOAD_BLOCK_TOKENS, "cpu_bytes_to_use": shape.cpu_bytes},
    }
    return json.dumps(cfg, separators=(",", ":"))


def vllm_argv(
    python: str, shape: Shape, server: Server, max_num_seqs: int = MAX_NUM_SEQS, model_dir: str | None = None
) -> list[str]:
    """vLLM's own command line for one server (`python -m vllm.entrypoints.cli.main` = the `vllm` script):
    the shape's config with dummy weights, or `model_dir` holding a checkpoint (weights.py)."""
    model, load = (model_dir, ()) if model_dir else (str(HERE / shape.config_dir), DUMMY_WEIGHTS)
    argv = [python, "-m", "vllm.entrypoints.cli.main", "serve", model]
    argv += ["--served-model-name", shape.served, *load, *VLLM_FLAGS]
    argv += ["--gpu-memory-utilization", str(shape.gpu_util)]
    argv += ["--max-num-seqs", str(max_num_seqs), *VLLM_REQUEST_FLAGS, *shape.parallel]
    argv += ["--host", "127.0.0.1", "--port", str(server.port)]
    if server.connector:
        argv += ["--kv-transfer-config", kv_transfer_config(shape)]
    return argv


def vllm_env(shape: Shape) -> dict[str, str]:
    return {**VLLM_ENV, **(MULTI_GPU_ENV if shape.gpus > 1 else {})}


def simulate_argv(python: str, shape: Shape, server: Server, time_scale: float, seed: int) -> list[str]:
    """The product's simulator standing in for that server (rehearsal, no GPU)."""
    argv = [python, "-m", "kvoffload_exporter", "simulate", "--listen", f"127.0.0.1:{server.port}"]
    argv += ["--vllm-version", "0.26.0", "--calibration", shape.calibration, "--model", shape.served]
    argv += ["--kv-bytes-per-token", str(shape.kv_bytes_per_token), "--engines", str(shape.sim_engines)]
    argv += ["--time-scale", str(time_scale), "--seed", str(seed + server.port)]
    argv += ["--cpu-bytes", str(shape.cpu_bytes)] if server.connector else ["--no-connector"]
    return argv


def serve_argv(python: str, servers: tuple[Server, ...], listen_port: int) -> list[str]:
    argv = [python, "-m", "kvoffload_exporter", "serve"]
    for s in servers:
        argv += ["--target", s.url]
    return [*argv, "--web.listen-address", f"127.0.0.1:{listen_port}", "--poll.interval", "1"]


def check_argv(
    python: str, servers: tuple[Server, ...], sweep: Sweep, *, json_path: str, evidence: str, secret: str, seed: int
) -> list[str]:
    """The product's canary with its load sweep: A is the target, B the control."""
    a, b = servers
    argv = [python, "-m", "kvoffload_exporter", "check", "--target", a.url, "--control-target", b.url]
    argv += ["--rounds", str(sweep.rounds), "--min-samples", str(sweep.min_samples), "--allow-pressure"]
    argv += [
        "--concurrency",
        sweep.levels,
        "--min-bursts",
        str(sweep.min_bursts),
        "--budget-tokens-per-hour",
        "unlimited",
    ]
    argv += ["--seed", str(seed), "--json", json_path, "--out", evidence, "--secret-file", secret]
    return argv + (["--settle", str(sweep.settle_s)] if sweep.settle_s is not None else [])


def inspect_argv(python: str, before: str, after: str) -> list[str]:
    return [python, "-m", "kvoffload_exporter", "inspect", "--json", before, after]
