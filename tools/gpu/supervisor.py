"""Runs one `spec.RunSpec`: servers up (A, then B once A is healthy), `serve`, `check`, the built-in canary,
final scrapes, everything stopped; the evidence lands in one output directory.

    python tools/gpu/supervisor.py --shape 0.6b --backend vllm --out DIR   # on a GPU machine with vLLM 0.26.0
    python tools/gpu/supervisor.py --shape 0.6b --backend sim --out DIR    # rehearsal: the product's simulator

Nothing happens at import. The exporter under test is this repository's (`python -m exporter`, the
repository on PYTHONPATH); SSE goes through `exporter.canary.protocol`, counters through `exporter.normalise`.
Exit code: `check`'s own (0 effective, 1 ineffective, 2 inconclusive, 3 error), 10 when a server did
not come up, 11 when `check` ran past its cap.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from spec import CANARY, CANARY_PROMPT_TOKENS, CANARY_SEED, VLLM_ENV, RunSpec, Server, exporter_argv

REPO = Path(__file__).resolve().parents[2]
Launch = tuple[list[str], dict[str, str]]  # argv and extra environment of one server


@dataclass
class Log:
    path: Path
    t0: float = field(default_factory=time.monotonic)
    events: list[str] = field(default_factory=list)

    def __call__(self, *parts: object) -> None:
        line = f"[{time.monotonic() - self.t0:6.1f}s] " + " ".join(str(p) for p in parts)
        print(line, flush=True)
        self.events.append(line)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(line + "\n")


class Group:
    """Child processes, each in its own process group, stopped with SIGINT then SIGKILL of the group."""

    def __init__(self, work: Path, log: Log):
        self.work, self.log = work, log
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with (self.work / f"{name}.log").open("wb") as out:
            p = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, process_group=0
            )
        self.procs.append((name, p))
        self.log(f"started {name} pid {p.pid}: {' '.join(argv)}")
        return p

    def stop_all(self) -> None:
        for name, p in reversed(self.procs):
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGINT)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=20)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)  # the engine core and workers of the group too
            p.wait()
            self.log(f"stopped {name} rc={p.returncode}")


def get(port: int, path: str, timeout: float = 10) -> tuple[int | None, str]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read().decode("utf-8", "replace")
    except OSError as e:
        return None, repr(e)
    finally:
        c.close()


def wait_healthy(port: int, proc: subprocess.Popen[bytes], timeout_s: float, path: str = "/health") -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if get(port, path, timeout=2)[0] == 200:
            return True
        time.sleep(0.5)
    return False


def complete(port: int, model: str, tokens: list[int], salt: str | None = None) -> dict[str, Any]:
    """One streamed completion, max_tokens 1; client TTFT = the first `data:` event."""
    from exporter.canary.protocol import SseReader

    body: dict[str, Any] = {"model": model, "prompt": tokens, "max_tokens": 1, "temperature": 0.0}
    body |= {"ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    if salt:
        body["cache_salt"] = salt
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=180)
    res: dict[str, Any] = {"ok": False}
    try:
        t0 = time.perf_counter()
        c.request("POST", "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            return res | {"status": r.status, "error": r.read().decode("utf-8", "replace")[:500]}
        reader = SseReader()
        while not reader.done and (line := r.readline()):
            for event in reader.feed(line):
                if not isinstance(event, dict):
                    continue
                res.setdefault("ttft_ms", round((time.perf_counter() - t0) * 1e3, 3))
                res |= {k: event[k] for k in ("usage", "metrics", "error") if event.get(k)}
        res["ok"] = "ttft_ms" in res and "error" not in res
        return res
    except (OSError, ValueError) as e:
        return res | {"error": repr(e)}
    finally:
        c.close()


def counters(port: int) -> dict[str, float]:
    """The engine's counters as the exporter reads them (summed over engines)."""
    from exporter.normalise import normalise

    status, text = get(port, "/metrics")
    out: dict[str, float] = {}
    if status == 200:
        for eng in normalise(text).engines:
            for k, v in eng.counters.items():
                out[k] = out.get(k, 0.0) + v
    return out


def canary(spec: RunSpec, server: Server, log: Log, settle_s: float) -> list[dict[str, Any]]:
    rng = random.Random(CANARY_SEED)

    def fresh(n: int) -> list[int]:
        return [rng.randrange(1000, 150_000) for _ in range(n)]

    prefix, steps = fresh(CANARY_PROMPT_TOKENS), []
    for step in CANARY:
        before = counters(server.port)
        tokens = prefix if step.prompt == "P" else fresh(CANARY_PROMPT_TOKENS)
        r = complete(server.port, spec.shape.served, tokens, salt=f"kvo-{rng.random():.6f}" if step.salted else None)
        if step.flush:
            time.sleep(settle_s)
            complete(server.port, spec.shape.served, fresh(4))
            time.sleep(settle_s)
        after = counters(server.port)
        delta = {k: round(v - before.get(k, 0.0), 6) for k, v in after.items() if v != before.get(k, 0.0)}
        steps.append({"step": step.name, **{k: r.get(k) for k in ("ok", "ttft_ms", "error")}, "delta": delta})
        short = {k: v for k, v in delta.items() if "hits" in k or "bytes" in k}
        log(f"canary {server.phase} {step.name:<10} ok={r['ok']} ttft={r.get('ttft_ms')}ms {json.dumps(short)}")
    return steps


def scrape(port: int, dest: Path) -> None:
    status, text = get(port, "/metrics")
    if status == 200:
        dest.write_text(text, encoding="utf-8")


@contextlib.contextmanager
def running(group: Group) -> Iterator[Group]:
    try:
        yield group
    finally:
        group.stop_all()


def execute(spec: RunSpec, launch: dict[str, Launch], out: Path, python: str, log: Log, settle_s: float) -> int:
    """The whole sequence; every file it writes is under `out`."""
    summary: dict[str, Any] = {"spec": asdict(spec), "servers": {}}
    with running(Group(out, log)) as group:
        for server in spec.servers:
            proc = group.start(f"server_{server.phase}", *launch[server.phase])
            t = time.monotonic()
            if not wait_healthy(server.port, proc, spec.health_timeout_s):
                log(f"server {server.phase} did not come up (rc {proc.poll()}); see server_{server.phase}.log")
                return 10
            summary["servers"][server.phase] = {"ready_s": round(time.monotonic() - t, 1)}
            log(f"server {server.phase} healthy after {summary['servers'][server.phase]['ready_s']} s")
        listen_port = int(spec.listen.rsplit(":", 1)[1])
        serve = group.start("serve", exporter_argv(python, spec.serve_args, spec))
        if not wait_healthy(listen_port, serve, 30, "/metrics"):
            log("serve did not come up; see serve.log")
            return 10
        target = spec.servers[0]
        scrape(target.port, out / "target_metrics_before.prom")
        check = exporter_argv(
            python,
            spec.check_args,
            spec,
            json=str(out / "check.json"),
            evidence=str(out / "evidence"),
            secret=str(out / "canary.secret"),
        )
        log("check:", " ".join(check))
        try:
            with (out / "check.log").open("wb") as f:
                rc = subprocess.run(check, stdout=f, stderr=subprocess.STDOUT, timeout=spec.check_timeout_s).returncode
        except subprocess.TimeoutExpired:
            log(f"check ran past {spec.check_timeout_s} s")
            rc = 11
        log(f"check rc={rc}")
        scrape(target.port, out / "target_metrics_after.prom")
        summary["canary"] = {s.phase: canary(spec, s, log, settle_s) for s in spec.servers}
        scrape(listen_port, out / "exporter_metrics.txt")
        for server in spec.servers:
            scrape(server.port, out / f"vllm_{server.phase}_metrics.txt")
    summary["check_rc"], summary["events"] = rc, log.events
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return rc


def main(argv: list[str] | None = None) -> int:
    from spec import CANARY_SETTLE_S, SHAPES, run_spec, simulate_argv, vllm_argv, with_ports

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", choices=sorted(SHAPES), default="0.6b")
    p.add_argument("--backend", choices=("vllm", "sim"), required=True)
    p.add_argument("--out", type=Path, required=True, help="output directory (must not exist)")
    p.add_argument("--python", default=sys.executable, help="interpreter for the servers and the exporter")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--ports", type=int, nargs=3, metavar=("A", "B", "EXPORTER"), help="default 8000 8001 9400")
    p.add_argument("--time-scale", type=float, default=0.2, help="sim backend: wall seconds per simulated second")
    p.add_argument("--seed", type=int, default=1, help="sim backend: simulator seed")
    p.add_argument("--settle", type=float, default=CANARY_SETTLE_S, help="canary: seconds around each flush")
    a = p.parse_args(argv)
    spec = run_spec(a.shape, a.rounds)
    if a.ports:
        spec = with_ports(spec, (a.ports[0], a.ports[1]), a.ports[2])
    try:
        a.out.mkdir(parents=True)
    except FileExistsError:
        print(f"supervisor: {a.out} exists; pick a new output directory", file=sys.stderr)
        return 2
    if a.backend == "vllm":
        launch = {s.phase: (vllm_argv(a.python, spec, s), VLLM_ENV) for s in spec.servers}
    else:
        launch = {s.phase: (simulate_argv(a.python, spec, s, a.time_scale, a.seed), {}) for s in spec.servers}
    # The exporter under test is this checkout, for the children and for the canary's readers here.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    sys.path.insert(0, str(REPO))
    return execute(spec, launch, a.out, a.python, Log(a.out / "run.log"), a.settle)


if __name__ == "__main__":
    sys.exit(main())
