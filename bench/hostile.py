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
    model-churn    a real vLLM body whose 910-character model_name is new on every poll (label churn)
    junk-labels    a bad label set of 30 KB of junk, different on every poll (a log flood by parse errors)
    http09         an answer without a status line: 64 KB of raw bytes, different every time (log flood)

Each run also reports what the exporter wrote to its log, and that projected to bytes per target-hour:
linearly, or, when the exporter held lines back (its log budget), as one 5-minute interval's lines
12 times an hour (a shorter run holds one interval's lines).

`--listener` measures the connection slots instead: a `serve` attacked by 5 source addresses × 64
half-sent requests (reopened when closed), then by 50 addresses, while /healthz is asked every 100 ms
from an address answered before the attack and from a new address each time (availability in %):

    python bench/hostile.py --only model-churn --targets 8,64 --interval 0.5 --seconds 90
    python bench/hostile.py --listener [--seconds 20]

Peak RSS is the kernel's high-water mark (VmHWM), not a sample. `--targets 1,4,16` runs each scenario
with that many hostile targets on one exporter; `--all-at-once` adds one exporter with every
scenario's target at once (the deploy memory limit is set from these figures, see docs/security.md):

    python bench/hostile.py [--seconds 20] [--only 100k-engines] [--targets 1,4,16] [--all-at-once] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
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
CODE = [ROOT]  # whose `kvoffload_exporter` runs (cwd and PYTHONPATH): `--root DIR`, an older commit's, for a before

TARGET = r"""
import asyncio, os, sys
from aiohttp import web
kinds, port = sys.argv[1].split(","), int(sys.argv[2])
real = open(sys.argv[3]).read()
polls = 0
def body(kind):
    global polls
    polls += 1
    if kind == "model-churn":
        return real.replace("Qwen/Qwen3-0.6B", f"{polls:010d}" + "m" * 900)
    if kind == "http09":  # answered on the raw port; this one only says the target is up
        return "# up\n"
    if kind == "junk-labels":
        junk = os.urandom(15_000).hex()
        return f'vllm:prefix_cache_hits_total{{engine="0",model_name="m",{junk}}} 1\n'
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
static = {k: body(k) for k in kinds if k not in ("churn", "10k-series", "model-churn", "junk-labels", "http09")}
async def metrics(request):
    kind = kinds[int(request.match_info["i"]) % len(kinds)]
    return web.Response(text=static.get(kind) or body(kind), content_type="text/plain")
async def raw(reader, writer):  # http09: no status line, 64 KB of printable junk, new every time
    await reader.read(4096)
    writer.write(b"X" + os.urandom(32_768).hex().encode())
    await writer.drain()
    writer.close()
async def main():
    app = web.Application()
    app.router.add_get("/t{i}/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.start_server(raw, "127.0.0.1", port + 1)
    await asyncio.Event().wait()
asyncio.run(main())
"""

SCENARIOS = (
    "10k-engines", "100k-engines", "10k-series", "huge-label", "churn", "short-lines", "keyed-lines", "long-labels",
    "model-churn", "junk-labels", "http09",
)  # fmt: skip
FIXTURE = ROOT / "tests" / "fixtures" / "h200-0.6b" / "A_12_final.prom"
LOG_INTERVAL = 300.0  # kvoffload_exporter.server.logbudget.LOG_INTERVAL


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


def free_port(pair: bool = False) -> int:
    """A free port (with `pair`, one whose successor is free too: the raw http09 server's)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if not pair:
            return port
        with socket.socket() as s, contextlib.suppress(OSError):
            s.bind(("127.0.0.1", port + 1))
            return port


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


def _counter(text: str, name: str) -> float:
    return next((float(x.rsplit(" ", 1)[1]) for x in text.splitlines() if x.startswith(name + " ")), 0.0)


def _url(tport: int, kind: str, i: int) -> str:
    return f"http://127.0.0.1:{tport + 1}/t{i}" if kind == "http09" else f"http://127.0.0.1:{tport}/t{i}"


def run(kinds: list[str], targets: int, seconds: float, interval: float = 1.0) -> dict[str, object]:
    """`targets` targets of one exporter; target i serves kinds[i % len(kinds)]."""
    env = {**os.environ, "PYTHONPATH": str(CODE[0])}
    tport, eport = free_port(pair=True), free_port()
    target = subprocess.Popen([sys.executable, "-c", TARGET, ",".join(kinds), str(tport), str(FIXTURE)], env=env)
    exporter = None
    tmp = Path(tempfile.mkdtemp())
    log = (tmp / "serve.log").open("wb")
    try:
        wait_up(f"http://127.0.0.1:{tport}/t0/metrics", 120.0)
        config = tmp / "hostile.yaml"
        config.write_text(
            "targets:\n"
            + "".join(f"  - {{url: '{_url(tport, kinds[i % len(kinds)], i)}', name: t{i}}}\n" for i in range(targets))
        )
        exporter = subprocess.Popen(
            [
                sys.executable, "-m", "kvoffload_exporter", "serve", "--config.file", str(config),
                "--web.listen-address", f"127.0.0.1:{eport}", "--poll.interval", str(interval),
                "--poll.timeout", "5", "--no-collector.gpu", "--no-collector.host",
            ],
            env=env, stdout=subprocess.DEVNULL, stderr=log, cwd=CODE[0],
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
        churned, held = (
            _counter(text, "kvoffload_exporter_label_churn_total"),
            _counter(text, "kvoffload_exporter_log_lines_suppressed_total"),
        )
        log_bytes = (tmp / "serve.log").stat().st_size
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
            "label_churn": churned,
            "log_bytes": log_bytes,
            # lines held back: the log budget applies, and a run under its interval holds one interval's lines
            "log_bytes_per_target_hour": round(
                log_bytes / targets * 3600 / (max(seconds, LOG_INTERVAL) if held else seconds)
            ),
            "log_lines_held_back": held,
        }
    finally:
        for p in (exporter, target):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        log.close()


HALF = b"GET /metrics HTTP/1.1\r\nHost: x\r\n"


def _hold(port: int, source: str, per: int, until: float) -> None:
    """Keep `per` half-sent requests open from `source`, reopening each one the exporter closes."""
    held: list[socket.socket] = []
    while time.monotonic() < until:
        while len(held) < per and time.monotonic() < until:
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=1, source_address=(source, 0))
                s.sendall(HALF)
                s.setblocking(False)
                held.append(s)
            except OSError:
                time.sleep(0.05)
        time.sleep(0.1)
        for s in list(held):
            try:
                if s.recv(1) == b"":
                    raise ConnectionError
            except BlockingIOError:
                continue
            except OSError:
                pass
            s.close()
            held.remove(s)
    for s in held:
        s.close()


def _healthz(port: int, source: str) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2, source_address=(source, 0)) as s:
            s.settimeout(2)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return s.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def listener(addresses: int, per: int, seconds: float) -> dict[str, object]:
    """`addresses` × `per` half-sent requests against one `serve` for `seconds`, /healthz every 100 ms."""
    import threading

    env = {**os.environ, "PYTHONPATH": str(CODE[0])}
    port = free_port()
    cmd = [sys.executable, "-m", "kvoffload_exporter", "serve", "--target", "http://127.0.0.1:9"]
    cmd += ["--web.listen-address", f"127.0.0.1:{port}", "--no-collector.gpu", "--no-collector.host"]
    exporter = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=CODE[0])
    try:
        wait_up(f"http://127.0.0.1:{port}/healthz")  # 127.0.0.1 is answered before the attack: a scraper seen
        until = time.monotonic() + seconds
        sources = [f"127.0.{1 + i // 200}.{2 + i % 200}" for i in range(addresses)]
        threads = [threading.Thread(target=_hold, args=(port, a, per, until), daemon=True) for a in sources]
        for t in threads:
            t.start()
        time.sleep(min(2.0, seconds / 4))  # the attack is in place
        seen = new = asked = 0
        while time.monotonic() < until - 0.5:
            asked += 1
            seen += _healthz(port, "127.0.0.1")
            new += _healthz(port, f"127.0.9.{1 + asked % 250}")  # never answered before (the /healthz lane)
            time.sleep(0.1)
        for t in threads:
            t.join(seconds + 5)
        text = timed_get(f"http://127.0.0.1:{port}/metrics")[1].decode()
        refused = next((float(x.rsplit(" ", 1)[1]) for x in text.splitlines() if 'reason="connection_limit"' in x), 0.0)
        return {
            "attack": f"{addresses} addresses x {per} half-sent",
            "healthz_asked": asked,
            "healthz_seen_ok_pct": round(100 * seen / max(asked, 1), 1),
            "healthz_new_address_ok_pct": round(100 * new / max(asked, 1), 1),
            "connection_limit_refusals": refused,
            "rss_peak_mib": round(vm_hwm(exporter.pid) / 2**20, 1),
        }
    finally:
        exporter.send_signal(signal.SIGTERM)
        try:
            exporter.wait(timeout=30)
        except subprocess.TimeoutExpired:
            exporter.kill()
            exporter.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="probe time per scenario")
    ap.add_argument("--only", choices=SCENARIOS, action="append")
    ap.add_argument("--targets", default="1", help="comma-separated hostile target counts per scenario (0: none)")
    ap.add_argument("--all-at-once", action="store_true", help="also one exporter with every scenario at once")
    ap.add_argument("--interval", type=float, default=1.0, help="the exporter's poll interval (seconds)")
    ap.add_argument("--listener", action="store_true", help="the connection-slot attacks instead")
    ap.add_argument("--root", type=Path, help="run another checkout's code (a before figure)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    CODE[0] = args.root or ROOT
    counts = [int(n) for n in args.targets.split(",")]
    if args.listener:
        rows = [listener(5, 64, args.seconds), listener(50, 64, args.seconds)]
    else:
        rows = [run([k], n, args.seconds, args.interval) for k in (args.only or SCENARIOS) for n in counts if n]
    if args.all_at_once:
        kinds = list(args.only or SCENARIOS)
        rows.append(run(kinds, len(kinds), args.seconds, args.interval))
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
