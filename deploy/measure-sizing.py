"""Measure the exporter's memory and CPU per number of targets (the figures in docs/deploy.md, "Sizing").

    python deploy/measure-sizing.py [--bin DIR] [--targets 1 10] [--seconds 30]

Starts simulated vLLM servers (`kvoffload-exporter simulate`, each with its own shared-prefix traffic)
on free 127.0.0.1 ports, then for each target count runs `kvoffload-exporter serve` against that many
of them, by default with `--poll-interval 1 --window 1m`: the same history depth per target (63
snapshots) as the serve defaults 5 s / 5 m, reached in one minute instead of five (CPU is then about
five times the default's; `--poll-interval 5 --window 5m --fill 320` measures the defaults as they are).
It samples /proc/<pid>/status VmRSS once a second after the window has filled, scrapes /metrics like
Prometheus would, and prints JSON: median and peak RSS, VmHWM, CPU share and the /metrics size.
Everything stays on loopback and stops by itself.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def status(pid: int) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if v.strip().endswith("kB"):
                out[k] = int(v.split()[0]) * 1024
    return out


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_http(url: str, deadline: float) -> None:
    while True:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def measure(exe: str, targets: list[str], seconds: float, poll: str, window: str, fill: float) -> dict[str, object]:
    port = free_port()
    cmd = [
        exe,
        "serve",
        "--web.listen-address",
        f"127.0.0.1:{port}",
        "--poll.interval",
        poll,
        "--state.window",
        window,
        "--no-collector.gpu",
        "--log.level",
        "WARNING",
    ]
    for t in targets:
        cmd += ["--target", t]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", time.monotonic() + 20)
        time.sleep(fill)  # fill the window: 63 polls per target with the defaults here
        rss, body = [], b""
        cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
        end = t0 + seconds
        while time.monotonic() < end:
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
            rss.append(status(proc.pid)["VmRSS"])
            time.sleep(1)
        cpu = (cpu_seconds(proc.pid) - cpu0) / (time.monotonic() - t0)
        st = status(proc.pid)
        return {
            "targets": len(targets),
            "poll_interval": poll,
            "window": window,
            "rss_median_mib": round(statistics.median(rss) / 2**20, 1),
            "rss_max_mib": round(max(rss) / 2**20, 1),
            "vmhwm_mib": round(st["VmHWM"] / 2**20, 1),
            "cpu_share_of_one_core": round(cpu, 4),
            "metrics_bytes": len(body),
            "metrics_samples": sum(1 for ln in body.splitlines() if ln and not ln.startswith(b"#")),
        }
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.dirname(sys.executable), help="directory with kvoffload-exporter")
    ap.add_argument("--targets", type=int, nargs="+", default=[1, 10])
    ap.add_argument("--seconds", type=float, default=30, help="sampling time after the window filled")
    ap.add_argument("--rate", type=float, default=1.0, help="traffic per simulator, requests/s")
    ap.add_argument("--poll-interval", default="1", help="exporter --poll.interval (default 1)")
    ap.add_argument("--window", default="1m", help="exporter --state.window (default 1m)")
    ap.add_argument("--fill", type=float, default=65, help="seconds before sampling starts (default 65)")
    args = ap.parse_args()
    exe = os.path.join(args.bin, "kvoffload-exporter")
    n = max(args.targets)
    sims, urls = [], []
    duration = str(120 + len(args.targets) * (args.fill + 10 + args.seconds) + 60)
    try:
        for _ in range(n):
            p = free_port()
            sims.append(
                subprocess.Popen(
                    [
                        exe,
                        "simulate",
                        "--listen",
                        f"127.0.0.1:{p}",
                        "--traffic-rate",
                        str(args.rate),
                        "--traffic-duration",
                        duration,
                        "--duration",
                        duration,
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            urls.append(f"http://127.0.0.1:{p}")
        for u in urls:
            wait_http(u + "/metrics", time.monotonic() + 30)
        results = [
            measure(exe, urls[:k], args.seconds, args.poll_interval, args.window, args.fill) for k in args.targets
        ]
    finally:
        for s in sims:
            s.terminate()
        for s in sims:
            s.wait(10)
    print(
        json.dumps(
            {
                "python": subprocess.run(
                    [os.path.join(args.bin, "python"), "-V"], check=False, capture_output=True, text=True
                ).stdout.strip(),
                "results": results,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
