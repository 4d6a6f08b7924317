"""Benchmark: the exporter against hostile targets — RSS, CPU, /healthz and /metrics latency, SIGTERM.

Each scenario starts a fake target and a real `serve` process polling it every second, probes the
exporter's /healthz and /metrics for a while, then sends SIGTERM and times the exit:

    10k-engines    10,000 label sets, one engine each (over engine_limit and sample_limit)
    100k-engines   100,000 label sets (~7 MB, under the 16 MiB body cap)
    10k-series     10,000 series of one engine (under every cap: the cost of a big accepted body)
    huge-label     one 3.5 MB model_name (over label_value_length_limit)
    churn          50 engines (under engine_limit) whose label sets all change on every poll
    short-lines    16 MiB of 2.5 M short lines that no selector matches
    keyed-lines    16 MiB of lines that pass the per-line key filter but are not selected (`_created`)
    long-labels    16 MiB of selected lines with 1,000-character label values (under every cap)

Peak RSS is the kernel's high-water mark (VmHWM), not a sample. `--targets 1,4,16` runs each scenario
with that many hostile targets on one exporter; `--all-at-once` adds one exporter with every
scenario's target at once (the deploy memory limit is set from these figures, see docs/security.md):

    python bench/hostile.py [--seconds 20] [--only 100k-engines] [--targets 1,4,16] [--all-at-once] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]

TARGET = r"""
import sys
from aiohttp import web
kinds, port = sys.argv[1].split(","), int(sys.argv[2])
polls = 0
def body(kind):
    global polls
    polls += 1
    if kind == "100k-engines" or kind == "10k-engines":
        n = 100_000 if kind.startswith("100k") else 10_000
        return "".join(f'vllm:prefix_cache_hits_total{{engine="{i}",model_name="m"}} {i}\n' for i in range(n))
    if kind == "10k-series":
        return "".join(
            f'vllm:prefix_cache_hits_total{{engine="0",model_name="m",shard="{i}"}} {polls}\n' for i in range(10_000)
        )
    if kind == "huge-label":
        return f'vllm:prefix_cache_hits_total{{engine="0",model_name="{"m" * 3_500_000}"}} 1\n'
    if kind == "churn":
        return "".join(
            f'vllm:prefix_cache_hits_total{{engine="{polls}-{i}",model_name="m"}} 1\n' for i in range(50)
        )
    if kind == "short-lines":  # 16 MiB of 2.5 M short lines no selector matches
        return "a 1\n" * (16 * 2**20 // 4 - 1)
    if kind == "keyed-lines":  # lines that pass the per-line key but are not selected (_created)
        line = 'vllm:prefix_cache_hits_created{engine="0",model_name="m",x="%07d"} 1\n'
        return "".join(line % i for i in range(16 * 2**20 // len(line % 0) - 1))
    if kind == "long-labels":  # 16 MiB of selected lines with 1000-character values, under every cap
        v = "v" * 1000
        line = 'vllm:prefix_cache_hits_total{engine="0",model_name="m",x="%s%05d"} 1\n'
        return "".join(line % (v, i) for i in range(min(19_000, 16 * 2**20 // len(line % (v, 0)) - 1)))
    raise SystemExit(kind)
static = {k: body(k) for k in kinds if k not in ("churn", "10k-series")}
async def metrics(request):
    kind = kinds[int(request.match_info["i"]) % len(kinds)]
    return web.Response(text=static.get(kind) or body(kind), content_type="text/plain")
app = web.Application()
app.router.add_get("/t{i}/metrics", metrics)
web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)
"""

SCENARIOS = (
    "10k-engines", "100k-engines", "10k-series", "huge-label", "churn", "short-lines", "keyed-lines", "long-labels",
)  # fmt: skip


def vm_hwm(pid: int) -> int:
    """Peak RSS of the process so far (Linux VmHWM): sampling RSS would miss a short peak."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def timed_get(url: str, timeout: float = 30.0) -> tuple[float, bytes]:
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            data = r.read()
    except OSError:
        return float("inf"), b""
    return time.perf_counter() - t0, data


def wait_up(url: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if timed_get(url, 2.0)[0] != float("inf"):
            return
        time.sleep(0.2)
    raise SystemExit(f"not up: {url}")


def run(kinds: list[str], targets: int, seconds: float) -> dict[str, object]:
    """`targets` targets of one exporter; target i serves kinds[i % len(kinds)]."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    tport, eport = free_port(), free_port()
    target = subprocess.Popen([sys.executable, "-c", TARGET, ",".join(kinds), str(tport)], env=env)
    exporter = None
    try:
        wait_up(f"http://127.0.0.1:{tport}/t0/metrics", 120.0)
        config = Path(tempfile.mkdtemp()) / "hostile.yaml"
        config.write_text(
            "targets:\n"
            + "".join(f"  - {{url: 'http://127.0.0.1:{tport}/t{i}', name: t{i}}}\n" for i in range(targets))
        )
        exporter = subprocess.Popen(
            [
                sys.executable, "-m", "kvoffload_exporter", "serve", "--config", str(config),
                "--listen", f"127.0.0.1:{eport}", "--poll-interval", "1", "--timeout", "5", "--no-gpu", "--no-host",
            ],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        proc = psutil.Process(exporter.pid)
        base = f"http://127.0.0.1:{eport}"
        wait_up(base + "/healthz")
        cpu0, t0 = proc.cpu_times(), time.monotonic()
        health: list[float] = []
        metrics: list[float] = []
        rss: list[float] = []
        size = 0
        while time.monotonic() - t0 < seconds:
            health.append(timed_get(base + "/healthz")[0])
            dt, body = timed_get(base + "/metrics")
            metrics.append(dt)
            size = max(size, len(body))
            rss.append(proc.memory_info().rss)
            time.sleep(0.25)
        cpu1, t1 = proc.cpu_times(), time.monotonic()
        text = timed_get(base + "/metrics")[1].decode()
        errors: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("kvoffload_scrape_errors_total{") and not line.endswith(" 0.0"):
                reason = line.split('reason="')[1].split('"')[0]
                errors[reason] = errors.get(reason, 0.0) + float(line.rsplit(" ", 1)[1])
        peak = vm_hwm(exporter.pid)
        ts = time.monotonic()
        exporter.send_signal(signal.SIGTERM)
        try:
            exporter.wait(timeout=60)
            sigterm = time.monotonic() - ts
        except subprocess.TimeoutExpired:
            sigterm = float("inf")
        return {
            "scenario": "+".join(kinds) if len(kinds) > 1 else kinds[0],
            "targets": targets,
            "rss_peak_mib": round(max(peak, *rss) / 2**20, 1),
            "rss_end_mib": round(rss[-1] / 2**20, 1),
            "cpu_percent": round(100 * (sum(cpu1[:2]) - sum(cpu0[:2])) / (t1 - t0), 1),
            "healthz_p50_ms": round(1000 * statistics.median(health), 1),
            "healthz_max_ms": round(1000 * max(health), 1),
            "metrics_p50_ms": round(1000 * statistics.median(metrics), 1),
            "metrics_max_ms": round(1000 * max(metrics), 1),
            "metrics_bytes_max": size,
            "scrape_errors": errors,
            "sigterm_exit_s": round(sigterm, 2),
        }
    finally:
        for p in (exporter, target):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="probe time per scenario")
    ap.add_argument("--only", choices=SCENARIOS, action="append")
    ap.add_argument("--targets", default="1", help="comma-separated hostile target counts per scenario")
    ap.add_argument("--all-at-once", action="store_true", help="also one exporter with every scenario at once")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    counts = [int(n) for n in args.targets.split(",")]
    rows = [run([k], n, args.seconds) for k in (args.only or SCENARIOS) for n in counts]
    if args.all_at_once:
        rows.append(run(list(args.only or SCENARIOS), len(args.only or SCENARIOS), args.seconds))
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    cols = list(rows[0])
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r[c]) for c in cols) + " |")


if __name__ == "__main__":
    main()
