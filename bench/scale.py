"""Benchmark: one exporter process polling N fake vLLM targets, against a plain prometheus_client baseline.

Three processes: one cheap aiohttp server plays every target (a real vLLM 0.26.0 H200 capture whose
counters advance on every request, each target with its own model_name unless --same-model), the
exporter runs as a real `serve` subprocess, and this driver measures. Per target count it reports
the exporter's CPU (% of one core, ms per target poll), RSS, polls made and due, `/metrics` p50/p99
under 10 concurrent scrapes (identity and gzip), body bytes and poll lag p99 (seen by the fake
targets, so it does not trust the exporter's own clock). It measures after `--settle` seconds of polling
(default: the window plus one interval, so every target's history is full, as in a long-running sidecar;
RSS read earlier understates it). In the same run a plain
prometheus_client exporter serves the same series (parsed from the exporter's body) as the baseline.

    python bench/scale.py --targets 10,100,1000 --json bench-scale.json
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import CAPTURE, AdvancingBodies, free_port, prometheus_client_parse  # noqa: E402

_MODEL = 'model_name="Qwen/Qwen3-0.6B"'


# --- fake targets -----------------------------------------------------------------------------------


def run_fake(port: int, distinct: bool = True) -> None:
    """Serve /t/<i>/metrics and /t/<i>/version for any i; /stats returns (and resets) arrival times.
    With `distinct`, target i's model is named `Qwen/Qwen3-0.6B-t<i>`, as in a fleet of different models."""
    from aiohttp import web

    cap = AdvancingBodies(CAPTURE.read_text(encoding="utf-8"), per=100)
    requests: dict[str, int] = {}
    arrivals: dict[str, list[float]] = {}

    async def metrics(request: web.Request) -> web.Response:
        t = request.match_info["t"]
        n = requests[t] = requests.get(t, 0) + 1
        arrivals.setdefault(t, []).append(time.time())
        body = cap.body(n)
        if distinct:  # each target its own model: no label set is shared between targets
            body = body.replace(_MODEL, f'{_MODEL[:-1]}-{t}"')
        return web.Response(text=body, content_type="text/plain")

    async def version(request: web.Request) -> web.Response:
        return web.json_response({"version": "0.26.0"})

    async def stats(request: web.Request) -> web.Response:
        out = dict(arrivals)
        arrivals.clear()
        return web.json_response(out)

    app = web.Application()
    app.router.add_get("/t/{t}/metrics", metrics)
    app.router.add_get("/t/{t}/version", version)
    app.router.add_get("/stats", stats)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


# --- plain prometheus_client baseline ---------------------------------------------------------------


def run_baseline(port: int, body_file: str) -> None:
    """A plain prometheus_client exporter serving the same series from its own registry and server."""
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.parser import text_string_to_metric_families

    families = list(text_string_to_metric_families(Path(body_file).read_text(encoding="utf-8")))

    class Fixed:
        def collect(self) -> Any:
            return iter(families)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed())  # type: ignore[arg-type]
    start_http_server(port, addr="127.0.0.1", registry=registry)
    while True:
        time.sleep(3600)


# --- driver -----------------------------------------------------------------------------------------


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def _scrape_load(url: str, gzip_ok: bool, clients: int, per_client: int) -> dict[str, float]:
    """`clients` concurrent scrapers, `per_client` scrapes each: latency to the last byte, body size."""
    headers = {"Accept-Encoding": "gzip" if gzip_ok else "identity"}
    lat: list[float] = []
    size = 0
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(auto_decompress=False, timeout=timeout) as s:

        async def one() -> None:
            nonlocal size
            for _ in range(per_client):
                t0 = time.perf_counter()
                async with s.get(url, headers=headers) as r:
                    raw = await r.read()
                lat.append(time.perf_counter() - t0)
                size = len(raw)

        await asyncio.gather(*(one() for _ in range(clients)))
    return {"p50_ms": _pct(lat, 0.5) * 1e3, "p99_ms": _pct(lat, 0.99) * 1e3, "bytes": size}


async def _get(url: str, timeout: float = 30.0) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as s,
        s.get(url) as r,
    ):
        return r.status, await r.read()


async def _wait_up(url: str, n: int, deadline: float) -> bool:
    """Until the body shows `kvoffload_up ... 1.0` for all n targets (works on any exporter version)."""
    while time.monotonic() < deadline:
        try:
            status, body = await _get(url)
            if status == 200 and body.count(b"\nkvoffload_up{") and _count_up(body) >= n:
                return True
        except (aiohttp.ClientError, TimeoutError):
            pass
        await asyncio.sleep(1.0)
    return False


def _peak_mib(pid: int) -> float | None:
    """VmHWM: the process's peak resident set (Linux), None elsewhere."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _count_up(body: bytes) -> int:
    return sum(1 for line in body.split(b"\n") if line.startswith(b"kvoffload_up{") and line.endswith(b" 1.0"))


def _lags(arrivals: dict[str, list[float]], interval: float) -> tuple[list[float], int]:
    """Lateness of each poll vs the interval, and how many intervals were skipped entirely."""
    lags: list[float] = []
    missed = 0
    for ts in arrivals.values():
        for a, b in itertools.pairwise(ts):
            gap = b - a
            lags.append(max(0.0, gap - interval))
            missed += max(0, int(gap / interval + 0.5) - 1)
    return lags, missed


def _start(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=str(ROOT)
    )


def _stop(p: subprocess.Popen[bytes]) -> None:
    p.terminate()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


async def _measure(n: int, fake_port: int, opts: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    cfg = tmp / f"targets-{n}.yaml"
    lines = ["targets:"] + [
        f"  - {{url: 'http://127.0.0.1:{fake_port}/t/{i:04d}', name: 't{i:04d}'}}" for i in range(n)
    ]
    cfg.write_text("\n".join(lines) + "\n", encoding="utf-8")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = ["-m", "kvoffload_exporter", "serve", "--config.file", str(cfg), "--web.listen-address", f"127.0.0.1:{port}"]
    cmd += ["--poll.interval", str(opts.interval), "--state.window", f"{opts.window:g}s"]
    cmd += ["--no-collector.host", "--no-collector.gpu", "--log.level", "WARNING"]
    exp = _start(cmd, env)
    url = f"http://127.0.0.1:{port}{opts.path}"
    row: dict[str, Any] = {"targets": n, "window_s": opts.window}
    try:
        if not await _wait_up(url, n, time.monotonic() + opts.startup):
            row["error"] = f"not all targets up within {opts.startup:.0f}s"
            return row
        # Steady state: every target's history full (window / interval points), as in a long-running sidecar.
        settle = opts.window + opts.interval if opts.settle is None else opts.settle
        await asyncio.sleep(settle)
        proc = psutil.Process(exp.pid)
        await _get(f"http://127.0.0.1:{fake_port}/stats")  # reset arrivals
        c0, w0 = proc.cpu_times(), time.monotonic()
        await asyncio.sleep(opts.measure)
        c1, w1 = proc.cpu_times(), time.monotonic()
        _, raw = await _get(f"http://127.0.0.1:{fake_port}/stats")
        arrivals = {k: v for k, v in json.loads(raw).items() if int(k.lstrip("t") or 0) < n}
        polls = sum(len(v) for v in arrivals.values())
        cpu = (c1.user + c1.system) - (c0.user + c0.system)
        lags, missed = _lags(arrivals, opts.interval)
        row["reference_parse_ms"] = _reference_parse_ms()  # after the CPU window: it does not disturb it
        row.update(
            cpu_pct_one_core=100.0 * cpu / (w1 - w0),
            cpu_ms_per_poll=1e3 * cpu / max(polls, 1),
            cpu_user_ms_per_poll=1e3 * (c1.user - c0.user) / max(polls, 1),
            cpu_system_ms_per_poll=1e3 * (c1.system - c0.system) / max(polls, 1),
            rss_mib=proc.memory_info().rss / 2**20,
            rss_peak_mib=_peak_mib(exp.pid),
            polls=polls,
            polls_expected=int(n * opts.measure / opts.interval),
            missed_polls=missed,
            poll_lag_p99_s=_pct(lags, 0.99),
        )
        row["identity"] = await _scrape_load(url, False, opts.clients, opts.scrapes)
        row["gzip"] = await _scrape_load(url, True, opts.clients, opts.scrapes)
        _, body = await _get(url)
        if not opts.no_baseline:
            row["baseline"] = await _baseline(body, tmp, opts)
            for enc in ("identity", "gzip"):
                row[f"{enc}_p99_vs_baseline"] = row[enc]["p99_ms"] / row["baseline"][enc]["p99_ms"]
        row["gzip_ratio"] = row["identity"]["bytes"] / max(row["gzip"]["bytes"], 1)
    finally:
        _stop(exp)
    return row


def _reference_parse_ms(runs: int = 9) -> float:
    """The machine's speed when the row was measured: prometheus_client's parse of the capture one target
    serves (median ms, in this driver process). CPU % read on a busy or slower machine is higher; the
    pipeline benchmark's ratio is against the same parse."""
    text = CAPTURE.read_text(encoding="utf-8")
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        prometheus_client_parse(text)
        times.append(time.perf_counter() - t0)
    return 1e3 * sorted(times)[runs // 2]


async def _baseline(body: bytes, tmp: Path, opts: argparse.Namespace) -> dict[str, Any]:
    # The exporter's own series, minus OpenMetrics-only lines the 0.0.4 parser cannot read.
    text = body.decode().replace("# EOF\n", "")
    f = tmp / "baseline.prom"
    f.write_text(text, encoding="utf-8")
    port = free_port()
    p = _start([str(Path(__file__).resolve()), "baseline", "--port", str(port), "--body", str(f)])
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                await _get(url)
                break
            except aiohttp.ClientError:
                await asyncio.sleep(0.5)
        return {
            "identity": await _scrape_load(url, False, opts.clients, opts.scrapes),
            "gzip": await _scrape_load(url, True, opts.clients, opts.scrapes),
        }
    finally:
        _stop(p)


async def drive(opts: argparse.Namespace) -> list[dict[str, Any]]:
    fake_port = free_port()
    fake_args = [str(Path(__file__).resolve()), "fake", "--port", str(fake_port)]
    fake = _start(fake_args + (["--same-model"] if opts.same_model else []))
    rows = []
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                await _get(f"http://127.0.0.1:{fake_port}/stats")
                break
            except aiohttp.ClientError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.3)
        with tempfile.TemporaryDirectory() as d:
            for n in opts.targets:
                row = await _measure(n, fake_port, opts, Path(d))
                print(json.dumps(row), file=sys.stderr, flush=True)
                rows.append(row)
    finally:
        _stop(fake)
    return rows


def _table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| targets | CPU % of one core | CPU ms / poll | RSS MiB | polls made / due | missed polls | poll lag p99 s "
        "| /metrics p50/p99 ms identity | gzip | body bytes identity / gzip | baseline p99 ms identity / gzip "
        "| prometheus_client parse ms (machine speed) |"
    )
    out = [head, "|" + "---|" * 12]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['targets']} | {r['error']} |" + " |" * 10)
            continue
        i, g, b = r["identity"], r["gzip"], r.get("baseline")
        base = f"{b['identity']['p99_ms']:.1f} / {b['gzip']['p99_ms']:.1f}" if b else "not run"
        out.append(
            f"| {r['targets']} | {r['cpu_pct_one_core']:.1f} | {r['cpu_ms_per_poll']:.2f} | {r['rss_mib']:.0f} "
            f"| {r['polls']}/{r['polls_expected']} | {r['missed_polls']}/{r['polls_expected']} "
            f"| {r['poll_lag_p99_s']:.2f} | {i['p50_ms']:.1f}/{i['p99_ms']:.1f} | {g['p50_ms']:.1f}/{g['p99_ms']:.1f} "
            f"| {i['bytes']:,} / {g['bytes']:,} | {base} | {r.get('reference_parse_ms', float('nan')):.1f} |"
        )
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("role", nargs="?", default="drive", choices=["drive", "fake", "baseline"])
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--body", help=argparse.SUPPRESS)
    p.add_argument("--targets", default="10,100,1000", help="comma-separated target counts")
    p.add_argument("--interval", type=float, default=5.0, help="poll interval in seconds")
    p.add_argument("--measure", type=float, default=30.0, help="seconds of steady-state CPU measurement")
    p.add_argument("--window", type=float, default=300.0, help="the exporter's window in seconds (its default, 5m)")
    p.add_argument(
        "--settle",
        type=float,
        help="seconds of polling before measuring (default: window + interval, so every history is full)",
    )
    p.add_argument("--startup", type=float, default=120.0, help="seconds allowed until every target is up")
    p.add_argument("--clients", type=int, default=10, help="concurrent scrapers")
    p.add_argument("--scrapes", type=int, default=20, help="scrapes per scraper and encoding")
    p.add_argument("--path", default="/metrics", help="the exporter's telemetry path")
    p.add_argument("--json", help="also write the rows to this file")
    p.add_argument("--same-model", action="store_true", help="every target the same model_name (default: distinct)")
    p.add_argument("--no-baseline", action="store_true", help="skip the prometheus_client baseline scrapes")
    opts = p.parse_args()
    if opts.role == "fake":
        run_fake(opts.port, not opts.same_model)
        return 0
    if opts.role == "baseline":
        run_baseline(opts.port, opts.body)
        return 0
    try:
        opts.targets = [int(x) for x in opts.targets.split(",") if x]
    except ValueError:
        print("scale.py: --targets must be comma-separated integers", file=sys.stderr)
        return 2
    rows = asyncio.run(drive(opts))
    print(_table(rows))
    if opts.json:
        Path(opts.json).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
