"""CPU a poll on asyncio's event loop and on uvloop, measured in one process, the loops taking turns.

`bench/scale.py` reads the CPU of a real `serve` from outside; on a shared 2-core machine its CPU a poll
moves by ±10 % from one run to the next (the machine's own speed, other work), more than an event loop
changes it. Here N `TargetPoller`s poll `bench/scale.py`'s fake targets (another process, every cumulative
value advancing) back to back, 64 at once as `serve`'s slots allow, through one `PollClient`: the whole poll
as `serve` makes it (fetch, parse, derive, render), without the 5 s waits between polls. Each run creates its
loop (`server.eventloop`'s factory), polls `--warm` rounds, then `--rounds` rounds whose CPU time
(`time.process_time`, this process only) is divided by the polls made. The loops alternate run by run, so
the machine's drift hits both alike; the medians and their ratio are printed.

    python bench/event_loop.py                        # 500 targets, 10 rounds, 3 runs per loop
    python bench/event_loop.py --targets 1000 --runs 5 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import free_port
from kvoffload_exporter.config.settings import Config, TargetConfig
from kvoffload_exporter.server import eventloop
from kvoffload_exporter.server.targetpoller import TargetPoller
from kvoffload_exporter.sources.pollclient import PollClient

LOOPS = ("asyncio", "uvloop")
SLOTS = 64  # serve's default max_concurrent_polls


async def _polls(port: int, n: int, warm: int, rounds: int) -> tuple[float, int]:
    """(CPU seconds of the measured rounds, targets up at the end)."""
    cfg = Config(window=60.0)
    pollers = [
        TargetPoller(TargetConfig(url=f"http://127.0.0.1:{port}/t/{i:04d}", name=f"t{i:04d}"), cfg) for i in range(n)
    ]
    slots = asyncio.Semaphore(SLOTS)
    async with PollClient() as client:

        async def one(p: TargetPoller) -> None:
            async with slots:
                await p.poll_once(client)

        for _ in range(warm):
            await asyncio.gather(*(one(p) for p in pollers))
        gc.collect()
        c0 = time.process_time()
        for _ in range(rounds):
            await asyncio.gather(*(one(p) for p in pollers))
        cpu = time.process_time() - c0
    return cpu, sum(p.view.up for p in pollers)


def measure(port: int, opts: argparse.Namespace) -> dict[str, Any]:
    per_loop: dict[str, list[float]] = {loop: [] for loop in LOOPS}
    for _ in range(opts.runs):
        for loop in LOOPS:
            name, make = eventloop.factory(loop)
            if name != loop:
                raise SystemExit(f"event_loop.py: {loop} is not installed")
            cpu, up = eventloop.run(_polls(port, opts.targets, opts.warm, opts.rounds), make)
            if up != opts.targets:
                raise SystemExit(f"event_loop.py: {up} of {opts.targets} targets up")
            per_loop[loop].append(1e3 * cpu / (opts.targets * opts.rounds))
    med = {loop: statistics.median(v) for loop, v in per_loop.items()}
    return {
        "targets": opts.targets,
        "rounds": opts.rounds,
        "ms_per_poll": {loop: [round(x, 4) for x in v] for loop, v in per_loop.items()},
        "median_ms_per_poll": {loop: round(v, 4) for loop, v in med.items()},
        "uvloop_vs_asyncio": round(med["uvloop"] / med["asyncio"], 3),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--targets", type=int, default=500)
    p.add_argument("--rounds", type=int, default=10, help="measured polls of every target per run")
    p.add_argument("--warm", type=int, default=3, help="polls of every target before each run's measure")
    p.add_argument("--runs", type=int, default=3, help="runs per loop, the loops taking turns")
    p.add_argument("--json", help="also write the result to this file")
    opts = p.parse_args()
    port = free_port()
    fake = subprocess.Popen([sys.executable, str(Path(__file__).with_name("scale.py")), "fake", "--port", str(port)])
    try:
        time.sleep(1.5)
        row = measure(port, opts)
    finally:
        fake.terminate()
        fake.wait(10)
    print(json.dumps(row, indent=1))
    if opts.json:
        Path(opts.json).write_text(json.dumps(row, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
