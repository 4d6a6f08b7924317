"""Benchmark: hostile clients against `serve`'s own listener, auth, /probe and configuration.

Each case starts a real `serve` (file descriptors limited to 1,024, as in the issue's setup) against a
fake vLLM, attacks it from this process while a probe thread asks /healthz every 100 ms, and reports the
exporter's peak RSS, its CPU seconds, the worst /healthz latency and what the exporter wrote to its log:

    idle-flood        1,100 connections that send half a request line and stall
    slowloris         200 connections that send one header byte every 0.5 s
    malformed         2,000 malformed requests (HTTP/9.9, duplicate Content-Length, 9 KB URL)
    auth-flood        wrong passwords from 32 clients at once (bcrypt cost 10), then a first right login
    auth-timing       unknown user vs known user with a wrong password (bcrypt cost 5): median time of each
    probe-names       2,000 /probe requests on one allowed target, each with a new `name=`
    probe-slow        300 concurrent /probe of slow targets while a configured target polls every 1 s
    alias-bomb        SIGHUP with a 405-byte YAML alias bomb as --config.file, then SIGTERM
    yaml-7mb          SIGHUP with 7 MB of YAML as --config.file (under the 8 MiB cap)
    targets-10k       `serve --config.check` on 10,000 targets (wall time)
    version-bomb      /version answering 60 KB of `[` while /metrics is fine

`--root DIR` runs another checkout's code (e.g. `git archive` of the previous release) for a before/after
in the same run:

    python bench/hostile_listener.py [--seconds 8] [--only idle-flood] [--root DIR] [--json]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import http.client
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]

UPSTREAM = r"""
import asyncio, sys
from aiohttp import web
port, fixture = int(sys.argv[1]), open(sys.argv[2]).read()
async def handle(request):
    if request.path.endswith("/version"):
        if request.query.get("bomb") or "bomb" in request.path:
            return web.Response(body=b"[" * 60_000, content_type="application/json")
        return web.json_response({"version": "0.26.0"})
    if request.path.startswith("/slow"):
        await asyncio.sleep(30)
    return web.Response(text=fixture, content_type="text/plain")
app = web.Application()
app.router.add_get("/{tail:.*}", handle)
web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)
"""

BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8)
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, headers: dict[str, str] | None = None, timeout: float = 10.0) -> tuple[float, int]:
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=timeout) as r:
            r.read()
            status = int(r.status)
    except urllib.error.HTTPError as e:
        status = int(e.code)
    except OSError:
        return timeout, 0
    return time.perf_counter() - t0, status


ATTACKER = "127.0.0.2"  # hostile traffic comes from here; the /healthz probe and metric reads from 127.0.0.1


def attack_get(url: str, headers: dict[str, str] | None = None, timeout: float = 10.0) -> tuple[float, int]:
    """GET from the attacker's address."""
    parts = urllib.parse.urlsplit(url)
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout, source_address=(ATTACKER, 0))
    try:
        conn.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""), headers=headers or {})
        resp = conn.getresponse()
        resp.read()
        return time.perf_counter() - t0, resp.status
    except OSError:
        return timeout, 0
    finally:
        conn.close()


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


class Exporter:
    """A `serve` process with its upstream, a /healthz probe thread and RSS sampling."""

    def __init__(self, root: Path, tmp: Path, config: str, web: str | None = None) -> None:
        self.root, self.tmp = root, tmp
        self.up_port, self.port = free_port(), free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.upstream_url = f"http://127.0.0.1:{self.up_port}"
        fixture = ROOT / "tests" / "fixtures" / "h200-0.6b" / "A_12_final.prom"
        env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
        self.upstream = subprocess.Popen([sys.executable, "-c", UPSTREAM, str(self.up_port), str(fixture)], env=env)
        self.config = tmp / "config.yaml"
        self.config.write_text(config.format(up=self.upstream_url, port=self.port))
        self.log = tmp / "serve.log"
        cmd = [
            sys.executable,
            "-m",
            "kvoffload_exporter",
            "serve",
            "--config.file",
            str(self.config),
            "--no-collector.gpu",
            "--no-collector.host",
        ]
        if web:
            (tmp / "web.yml").write_text(web)
            cmd += ["--web.config.file", str(tmp / "web.yml")]

        def limit_fds() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))

        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=log, preexec_fn=limit_fds, cwd=root)
        self.ps = psutil.Process(self.proc.pid)
        self.headers = basic("prometheus", "s3cret") if web else {}
        self.health: list[float] = []
        self.rss = 0
        self._stop = threading.Event()
        deadline = time.monotonic() + 60
        while get(self.base + "/healthz", self.headers, 2.0)[1] != 200:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit("serve did not start: " + self.log.read_text()[-500:])
            time.sleep(0.2)
        self.cpu0 = sum(self.ps.cpu_times()[:2])
        self._probe = threading.Thread(target=self._watch, daemon=True)
        self._probe.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.health.append(get(self.base + "/healthz", self.headers, 10.0)[0])
            with contextlib.suppress(psutil.Error):
                self.rss = max(self.rss, self.ps.memory_info().rss)
            time.sleep(0.1)

    def finish(self) -> dict[str, object]:
        self._stop.set()
        self._probe.join()
        cpu = sum(self.ps.cpu_times()[:2]) - self.cpu0
        ts = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
            sigterm = round(time.monotonic() - ts, 2)
        except subprocess.TimeoutExpired:
            sigterm = float("inf")
        for p in (self.proc, self.upstream):
            if p.poll() is None:
                p.kill()
                p.wait()
        text = self.log.read_text(errors="replace")
        return {
            "rss_peak_mib": round(self.rss / 2**20, 1),
            "cpu_s": round(cpu, 2),
            "healthz_worst_ms": round(1000 * max(self.health, default=0.0), 1),
            "log_bytes": len(text.encode()),
            "tracebacks": text.count("Traceback"),
            "sigterm_s": sigterm,
        }


def metric(exp: Exporter, name: str) -> float:
    with urllib.request.urlopen(urllib.request.Request(exp.base + "/metrics", headers=exp.headers), timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


BASE = "targets: [{up}]\nlisten: 127.0.0.1:{port}\npoll_interval: 1\ntimeout: 3\n"
PROBE = "listen: 127.0.0.1:{port}\npoll_interval: 1\ntimeout: 3\nprobe:\n  allow_regex: '{up}.*'\n"


def _sockets(n: int, first: bytes, every: float = 0.0, seconds: float = 0.0) -> None:
    socks = []
    for _ in range(n):
        with contextlib.suppress(OSError):
            s = socket.create_connection(("127.0.0.1", PORT[0]), timeout=2, source_address=(ATTACKER, 0))
            s.sendall(first)
            socks.append(s)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for s in socks:
            with contextlib.suppress(OSError):
                s.sendall(b"a")
        time.sleep(every or 0.5)
    for s in socks:
        s.close()


PORT = [0]


def case_idle_flood(exp: Exporter, seconds: float) -> dict[str, object]:
    PORT[0] = exp.port
    _sockets(1100, b"GET /metrics HTTP/1.1\r\nHost: x\r\n", 30.0, seconds)
    return {}


def case_slowloris(exp: Exporter, seconds: float) -> dict[str, object]:
    PORT[0] = exp.port
    _sockets(200, b"GET /metrics HTTP/1.1\r\nX-a: ", 0.5, seconds)
    return {}


def case_malformed(exp: Exporter, seconds: float) -> dict[str, object]:
    bad = [
        b"GET / HTTP/9.9\r\nHost: x\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n",
    ]

    def one(i: int) -> None:
        with (
            contextlib.suppress(OSError),
            socket.create_connection(("127.0.0.1", exp.port), timeout=5, source_address=(ATTACKER, 0)) as s,
        ):
            s.sendall(bad[i % 3])
            s.recv(100)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(2000)))
    return {}


def case_auth_flood(exp: Exporter, seconds: float) -> dict[str, object]:
    stop = time.monotonic() + seconds
    url = exp.base + "/metrics"

    def flood(i: int) -> None:
        while time.monotonic() < stop:
            attack_get(url, basic("prometheus", f"guess{i}-{time.monotonic()}"), 30)

    with ThreadPoolExecutor(33) as pool:
        for i in range(32):
            pool.submit(flood, i)
        time.sleep(min(2.0, seconds / 2))
        login, status = get(url, {**basic("grafana", "s3cret"), "Connection": "close"}, 60)
    return {"first_login_ms": round(1000 * login, 1), "login_status": status}


def case_auth_timing(exp: Exporter, seconds: float) -> dict[str, object]:
    url = exp.base + "/metrics"
    unknown, known = [], []
    for i in range(15):
        unknown.append(get(url, basic(f"nobody{i}", f"x{i}"))[0])
        known.append(get(url, basic("prometheus", f"x{i}"))[0])
    u, k = statistics.median(unknown), statistics.median(known)
    return {"unknown_ms": round(1000 * u, 1), "known_wrong_ms": round(1000 * k, 1), "ratio": round(u / k, 2)}


def case_probe_names(exp: Exporter, seconds: float) -> dict[str, object]:
    for i in range(2000):
        attack_get(f"{exp.base}/probe?target={exp.upstream_url}/x&name=n{i}")
    return {"probed_targets": metric(exp, 'kvoffload_targets{kind="probed"}')}


def case_probe_slow(exp: Exporter, seconds: float) -> dict[str, object]:
    ages: list[float] = []
    stop = time.monotonic() + seconds

    def probe(i: int) -> None:
        attack_get(f"{exp.base}/probe?target={exp.upstream_url}/slow/{i}", timeout=seconds + 5)

    with ThreadPoolExecutor(300) as pool:
        for i in range(300):
            pool.submit(probe, i)
        time.sleep(1.0)
        while time.monotonic() < stop:
            last = metric(exp, 'kvoffload_last_success_timestamp_seconds{target="conf"}')
            ages.append(time.time() - last)
            time.sleep(0.5)
    return {"configured_last_success_age_max_s": round(max(ages), 1)}


def case_sighup(text: str) -> Callable[[Exporter, float], dict[str, object]]:
    def run(exp: Exporter, seconds: float) -> dict[str, object]:
        exp.config.write_text(text)
        exp.proc.send_signal(signal.SIGHUP)
        time.sleep(seconds)
        return {}

    return run


def case_version_bomb(exp: Exporter, seconds: float) -> dict[str, object]:
    time.sleep(seconds)
    return {"up": metric(exp, 'kvoffload_up{target="bomb"}')}


def targets_10k(root: Path, tmp: Path) -> dict[str, object]:
    conf = tmp / "fleet.yaml"
    conf.write_text("targets:\n" + "".join(f"  - http://10.{i // 250}.{i % 250}.1:8000\n" for i in range(10_000)))
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "kvoffload_exporter", "serve", "--config.file", str(conf), "--config.check"],
        env=env, capture_output=True, timeout=600, cwd=root,
    )  # fmt: skip
    return {"config_check_s": round(time.perf_counter() - t0, 2), "exit": r.returncode}


HASHES: dict[int, str] = {}


def _web(cost: int = 10) -> str:
    """`prometheus` (the probe thread's user, verified at start) and `grafana` (never logged in before)."""
    import bcrypt

    h = HASHES.setdefault(cost, bcrypt.hashpw(b"s3cret", bcrypt.gensalt(cost)).decode())
    return f"basic_auth_users:\n  prometheus: '{h}'\n  grafana: '{h}'\n"


CASES: dict[str, tuple[str, bool, Callable[[Exporter, float], dict[str, object]]]] = {
    "idle-flood": (BASE, False, case_idle_flood),
    "slowloris": (BASE, False, case_slowloris),
    "malformed": (BASE, False, case_malformed),
    "auth-flood": (BASE, True, case_auth_flood),
    "auth-timing": (BASE, True, case_auth_timing),
    "probe-names": (PROBE, False, case_probe_names),
    "probe-slow": (PROBE + "targets: [{{url: '{up}', name: conf}}]\n", False, case_probe_slow),
    "alias-bomb": (BASE, False, case_sighup(BOMB)),
    "yaml-7mb": (BASE, False, case_sighup("")),  # the text is built when the case runs
    "version-bomb": (
        "targets: [{{url: '{up}/bomb', name: bomb}}]\nlisten: 127.0.0.1:{port}\npoll_interval: 1\n",
        False,
        case_version_bomb,
    ),
}


def _yaml_7mb() -> str:
    """7 MB that must be parsed before it can be refused (an unknown key): the parse is the cost."""
    return "targets: [http://127.0.0.1:9]\npadding:\n" + "".join(f"  - '{i:08d}{'x' * 50}'\n" for i in range(110_000))


def run(name: str, root: Path, seconds: float) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if name == "targets-10k":
            return {"case": name, **targets_10k(root, tmp)}
        config, web, attack = CASES[name]
        if name == "yaml-7mb":
            attack = case_sighup(_yaml_7mb())
        exp = Exporter(root, tmp, config, _web(5 if name == "auth-timing" else 10) if web else None)
        try:
            extra = attack(exp, seconds)
            with contextlib.suppress(OSError):
                extra = {**extra, "rejected": metric(exp, "kvoffload_exporter_http_rejected_total")}
        finally:
            result = exp.finish()
        return {"case": name, **result, **extra}


def main() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=8.0, help="attack time per case")
    ap.add_argument("--only", choices=[*CASES, "targets-10k"], action="append")
    ap.add_argument("--root", type=Path, default=ROOT, help="checkout whose exporter is run")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = [run(k, args.root, args.seconds) for k in (args.only or [*CASES, "targets-10k"])]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    for r in rows:
        print(" ".join(f"{k}={v}" for k, v in r.items()))


if __name__ == "__main__":
    main()
