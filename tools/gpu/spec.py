"""The GPU reference run as data: which servers, which exporter invocations, which canary steps.

Pure and side-effect free (stdlib only), so `supervisor.py`, the local rehearsal and the tests read the
same definition. The values are those of the recorded H200 run (docs/gpu-reference-run.md §2): vLLM
0.26.0, phase A with the OffloadingConnector CPU tier on :8000, phase B without a connector on :8001,
the exporter's `serve` against both and its `check` with A as target and B as control.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Shape:
    """A model shape: config.json only (dummy weights), and the simulator calibration that imitates it."""

    config_dir: str  # under tools/gpu/
    served: str
    cpu_bytes: int  # cpu_bytes_to_use of phase A's CPU tier
    gpu_util: float  # --gpu-memory-utilization of each server (both share the GPU)
    calibration: str  # `kvoffload-exporter simulate --calibration` for the rehearsal


@dataclass(frozen=True)
class Server:
    phase: str  # "A": CPU tier, "B": no connector (the control)
    port: int

    @property
    def connector(self) -> bool:
        return self.phase == "A"


@dataclass(frozen=True)
class CanaryStep:
    """One request of the built-in canary: raw /metrics deltas around it, to compare with the exporter."""

    name: str
    prompt: str  # "P" (the fixed 6000-token prefix) or "fresh"
    salted: bool = False
    flush: bool = True  # settle, a 4-token request, settle: asynchronous stores get reported


@dataclass(frozen=True)
class RunSpec:
    shape: Shape
    servers: tuple[Server, ...]
    listen: str
    rounds: int
    serve_args: tuple[str, ...]
    check_args: tuple[str, ...]
    check_timeout_s: float
    health_timeout_s: float


# Engine flags of both servers (docs/gpu-reference-run.md §2.2); phase A adds --kv-transfer-config.
VLLM_FLAGS = (
    "--load-format",
    "dummy",
    "--skip-tokenizer-init",
    "--enforce-eager",
    "--max-model-len",
    "8192",
    "--block-size",
    "16",
    "--num-gpu-blocks-override",
    "640",
)
VLLM_FLAGS_AFTER_UTIL = ("--max-num-seqs", "16", "--enable-prompt-tokens-details", "--enable-per-request-metrics")
VLLM_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_USE_FLASHINFER_SAMPLER": "0",
    "VLLM_LOGGING_LEVEL": "INFO",
    "TOKENIZERS_PARALLELISM": "false",
}
OFFLOAD_BLOCK_TOKENS = 64

SHAPES = {
    "0.6b": Shape("model-0.6b", "Qwen/Qwen3-0.6B", 8_000_000_000, 0.4, "h200-qwen3-0.6b"),
    "32b": Shape("model-32b", "Qwen/Qwen3-32B", 16_000_000_000, 0.49, "h200-qwen3-32b"),
}

# {targets}, {target}, {control}, {listen}, {rounds}, {json}, {evidence}, {secret} are filled in by
# `exporter_argv`; a placeholder that is a whole argument and expands to nothing disappears.
SERVE_ARGS = ("serve", "{targets}", "--listen", "{listen}", "--poll-interval", "1")
CHECK_ARGS = (
    "check",
    "--target",
    "{target}",
    "{control}",
    "--rounds",
    "{rounds}",
    "--allow-pressure",
    "--json",
    "{json}",
    "--out",
    "{evidence}",
    "--secret-file",
    "{secret}",
)

CANARY = (
    CanaryStep("P_cold", "P"),
    CanaryStep("P_gpu_hit", "P"),
    CanaryStep("pressure0", "fresh", flush=False),
    CanaryStep("pressure1", "fresh", flush=False),
    CanaryStep("pressure2", "fresh"),
    CanaryStep("P_evicted", "P"),  # A: CPU-tier hit; B: recompute
    CanaryStep("P_salted", "P", salted=True),
)
CANARY_PROMPT_TOKENS = 6000
CANARY_SEED = 20261129
CANARY_SETTLE_S = 0.5


def run_spec(shape: str, rounds: int = 10) -> RunSpec:
    return RunSpec(
        shape=SHAPES[shape],
        servers=(Server("A", 8000), Server("B", 8001)),
        listen="127.0.0.1:9400",
        rounds=rounds,
        serve_args=SERVE_ARGS,
        check_args=CHECK_ARGS,
        check_timeout_s=300.0,
        health_timeout_s=300.0,
    )


def with_ports(spec: RunSpec, ports: tuple[int, int], listen_port: int) -> RunSpec:
    """The same run on other loopback ports (the rehearsal shares its machine with other suites)."""
    servers = tuple(Server(s.phase, p) for s, p in zip(spec.servers, ports))
    return RunSpec(**{**spec.__dict__, "servers": servers, "listen": f"127.0.0.1:{listen_port}"})


def url(server: Server) -> str:
    return f"http://127.0.0.1:{server.port}"


def kv_transfer_config(shape: Shape) -> str:
    cfg = {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"block_size": OFFLOAD_BLOCK_TOKENS, "cpu_bytes_to_use": shape.cpu_bytes},
    }
    return json.dumps(cfg, separators=(",", ":"))


def vllm_argv(python: str, spec: RunSpec, server: Server) -> list[str]:
    """vLLM's own command line for one server, exactly as in the recorded run."""
    shape = spec.shape
    argv = [python, "-m", "vllm.entrypoints.cli.main", "serve", str(HERE / shape.config_dir)]
    argv += ["--served-model-name", shape.served, *VLLM_FLAGS, "--gpu-memory-utilization", str(shape.gpu_util)]
    argv += [*VLLM_FLAGS_AFTER_UTIL, "--host", "127.0.0.1", "--port", str(server.port)]
    if server.connector:
        argv += ["--kv-transfer-config", kv_transfer_config(shape)]
    return argv


def simulate_argv(python: str, spec: RunSpec, server: Server, time_scale: float, seed: int) -> list[str]:
    """The product's simulator standing in for that server (local rehearsal, no GPU)."""
    shape = spec.shape
    argv = [python, "-m", "exporter", "simulate", "--listen", f"127.0.0.1:{server.port}"]
    argv += ["--vllm-version", "0.26.0", "--calibration", shape.calibration, "--model", shape.served]
    argv += ["--time-scale", str(time_scale), "--seed", str(seed + server.port)]
    argv += ["--cpu-bytes", str(shape.cpu_bytes)] if server.connector else ["--no-connector"]
    return argv


def exporter_argv(python: str, template: tuple[str, ...], spec: RunSpec, **paths: str) -> list[str]:
    """`python -m exporter` plus a filled-in argument template (`serve_args` or `check_args`)."""
    target, *rest = spec.servers
    fill: dict[str, list[str]] = {
        "{targets}": [a for s in spec.servers for a in ("--target", url(s))],
        "{target}": [url(target)],
        "{control}": ["--control-target", url(rest[0])] if rest else [],
        "{listen}": [spec.listen],
        "{rounds}": [str(spec.rounds)],
        **{f"{{{k}}}": [v] for k, v in paths.items()},
    }
    argv = [python, "-m", "exporter"]
    for arg in template:
        argv += fill.get(arg, [arg])
    return argv
