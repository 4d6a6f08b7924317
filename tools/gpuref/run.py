"""One GPU reference run: both servers up, the product's `check` load sweep, the cluster analysis, the captures.

    python tools/gpuref/run.py DIR SHAPE [--rehearse] [--levels 1,4,16,32] [--min-bursts 10] ...

SHAPE is one of spec.SHAPES. Server A (OffloadingConnector CPU tier) starts first, B (no connector) once A
answers /health (two vLLM servers profiling GPU memory at once can trip each other); `--rehearse` puts the
product's simulator in place of both. Then the product's `serve` watches both, its `check` measures A
against B with the sweep, and `clusters` recomputes each level from `check`'s own records. DIR receives at
most eight files (table in README.md); scratch files live in a temporary folder that is removed.
Exit code: 0 `check` wrote its document (whatever the verdict), 2 usage, 10 server A or 11 server B did not
come up, 12 `check` wrote no document or ran past its share of --deadline, 13 the seeded weights could not
be written.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import clusters
import spec

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
STOP_RESERVE_S = 45.0  # captures, analysis and stopping the servers after `check`
ANSWERS_RESERVE_S = 40.0  # answers.py on both servers (half each), when asked


class Log:
    def __init__(self, path: Path):
        self.path, self.t0 = path, time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def __call__(self, *parts: object) -> None:
        line = f"[{self.elapsed():6.1f}s] " + " ".join(str(p) for p in parts)
        print(line, flush=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(line + "\n")


class Children:
    """Each child in its own process group, stopped with SIGINT, then SIGKILL of the whole group."""

    def __init__(self, work: Path, log: Log):
        self.work, self.log = work, log
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        with (self.work / f"{name}.log").open("wb") as out:
            p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, process_group=0)
        self.procs.append((name, p))
        self.log(f"started {name} pid {p.pid}: {' '.join(argv)}")
        return p

    def stop_all(self) -> None:
        for name, p in reversed(self.procs):
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGINT)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=15)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)  # engine cores and workers left in the group
            p.wait()
            self.log(f"stopped {name} rc={p.returncode}")


@contextlib.contextmanager
def children(work: Path, log: Log) -> Iterator[Children]:
    group = Children(work, log)
    try:
        yield group
    finally:
        group.stop_all()


def fetch(url: str, timeout: float = 5.0) -> tuple[int | None, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, ""
    except (OSError, ValueError) as e:
        return None, repr(e)


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if fetch(url, timeout=2)[0] == 200:
            return True
        time.sleep(0.5)
    return False


def exporter_has_states(exporter: str, servers: tuple[spec.Server, ...], timeout_s: float) -> bool:
    """Until the exporter's /metrics carries a `kvoffload_state` of every server: a poll that timed out on a
    busy host is served as `up 0` without a state, and the capture is the run's evidence of what it saw."""
    deadline = time.monotonic() + timeout_s
    while True:
        lines = [ln for ln in fetch(exporter + "/metrics")[1].splitlines() if ln.startswith("kvoffload_state{")]
        if all(any(f'target="127.0.0.1:{s.port}"' in ln for ln in lines) for s in servers):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)


def env_with(extra: dict[str, str], *paths: str) -> dict[str, str]:
    """The caller's environment (host settings stay), these variables, and `paths` first on PYTHONPATH."""
    pp = os.pathsep.join(p for p in (*paths, os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, **extra, "PYTHONPATH": pp, "PYTHONUNBUFFERED": "1"}


def capture_proc(pgid: int, dest: Path, proc: Path = Path("/proc")) -> None:
    """The independent memory reading beside the exporter's: /proc/meminfo and, for every process of the
    server's group (API server, engine cores, workers), its status and smaps_rollup, saved as text."""
    parts = [f"== /proc/meminfo\n{_read(proc / 'meminfo')}"]
    for d in sorted((p for p in proc.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
        stat = _read(d / "stat")
        if stat and stat.rsplit(")", 1)[-1].split()[2:3] == [str(pgid)]:  # field 5: the process group
            for name in ("cmdline", "status", "smaps_rollup"):
                parts.append(f"== {d.name}/{name}\n{_read(d / name).replace(chr(0), ' ')}")
    dest.write_text("\n".join(parts), encoding="utf-8")


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def run_capped(argv: list[str], log_path: Path, env: dict[str, str], budget: float, log: Log) -> int:
    """`argv` for at most `budget` seconds; then SIGINT (a chance to write what it has), then SIGKILL."""
    with log_path.open("wb") as f:
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env)
        try:
            return p.wait(timeout=max(budget, 1))
        except subprocess.TimeoutExpired:
            log(f"{argv[3]} ran past {budget:.0f} s: interrupted")
            p.send_signal(signal.SIGINT)
        try:
            return p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            return p.wait()


def _pack(dest: Path, files: list[Path]) -> None:
    with tarfile.open(dest, "w:gz") as tar:
        for f in files:
            if f.exists():
                tar.add(f, arcname=f.name)


def execute(a: argparse.Namespace, out: Path, work: Path, log: Log) -> int:
    shape = spec.SHAPES[a.shape]
    servers = (spec.Server("A", a.ports[0]), spec.Server("B", a.ports[1]))
    sweep = spec.Sweep(a.levels, a.min_bursts, a.rounds, a.min_samples, a.settle)
    product_env = env_with({}, str(REPO))
    summary: dict[str, Any] = {"shape": a.shape, "spec": asdict(shape), "rehearse": a.rehearse, "servers": {}}
    rc = 12
    model_dir = None
    if a.weights == "seeded" and not a.rehearse:
        model_dir = str(work / "model")
        argv = [a.python, str(HERE / "weights.py"), str(spec.HERE / shape.config_dir), model_dir]
        done = subprocess.run(
            [*argv, "--qk-gain", str(a.qk_gain)], capture_output=True, text=True, env=env_with({}, a.site or "")
        )
        if done.returncode != 0:
            log(f"weights.py failed: {done.stderr.strip()[-2000:]}")
            _finish(out, work, summary, log, a.python)
            return 13
        summary["weights"] = json.loads(done.stdout.strip().splitlines()[-1])
        log(f"seeded weights written: {summary['weights']}")
    with children(work, log) as group:
        for server in servers:
            if a.rehearse:
                argv, env = spec.simulate_argv(a.python, shape, server, a.time_scale, a.seed), product_env
            else:
                argv = spec.vllm_argv(a.python, shape, server, model_dir=model_dir)
                env = env_with(spec.vllm_env(shape), a.site or "")
            proc = group.start(f"server_{server.role}", argv, env)
            t = time.monotonic()
            if not wait_ready(server.url + "/health", proc, a.health_timeout):
                log(f"server {server.role} did not come up (rc {proc.poll()}); its log: server_{server.role}.log")
                _finish(out, work, summary, log, a.python)
                return 10 if server.role == "A" else 11
            summary["servers"][server.role] = {"argv": argv, "ready_s": round(time.monotonic() - t, 1)}
            summary["servers"][server.role]["version"] = fetch(server.url + "/version")[1][:200]
            log(f"server {server.role} ready after {summary['servers'][server.role]['ready_s']} s")
        serve = group.start("serve", spec.serve_argv(a.python, servers, a.ports[2]), product_env)
        exporter = f"http://127.0.0.1:{a.ports[2]}"
        if not wait_ready(exporter + "/metrics", serve, 30):
            log("serve did not answer /metrics; the run goes on without it")
        (work / "vllm_A_before.prom").write_text(fetch(servers[0].url + "/metrics")[1], encoding="utf-8")
        argv = spec.check_argv(
            a.python,
            servers,
            sweep,
            json_path=str(out / "check.json"),
            evidence=str(work / "evidence"),
            secret=str(work / "canary.secret"),
            seed=a.seed,
        )
        budget = a.deadline - log.elapsed() - STOP_RESERVE_S - (ANSWERS_RESERVE_S if a.answers else 0)
        summary["check"] = {"argv": argv, "timeout_s": round(budget, 1)}
        log(f"check (at most {budget:.0f} s): {' '.join(argv)}")
        t = time.monotonic()
        rc = run_capped(argv, work / "check.log", product_env, budget, log)
        summary["check"] |= {"exit_code": rc, "wall_s": round(time.monotonic() - t, 1)}
        log(f"check exit {rc} after {summary['check']['wall_s']} s")
        if a.answers:
            summary["answers"] = answers(a, servers, shape.served, out / "answers.json", work, log)
        if not exporter_has_states(exporter, servers, 20.0):
            log("the exporter shows no state for every server after 20 s; captured as it is")
        for name, url in (("vllm_A", servers[0].url), ("vllm_B", servers[1].url), ("exporter", exporter)):
            (work / f"{name}_metrics.prom").write_text(fetch(url + "/metrics")[1], encoding="utf-8")
        capture_proc(group.procs[0][1].pid, work / "proc_A.txt")
    return _finish(out, work, summary, log, a.python, product_env)


def answers(
    a: argparse.Namespace, servers: tuple[spec.Server, ...], model: str, dest: Path, work: Path, log: Log
) -> dict[str, Any]:
    """The engine's own greedy answers (answers.py) on the control B and on A: cached vs recomputed prefix,
    and whether a changed first token changes the answer."""
    doc: dict[str, Any] = {}
    for server in servers:
        part = work / f"answers_{server.role}.json"
        argv = [a.python, str(HERE / "answers.py"), server.url, model, str(part), "--role", server.role]
        argv += ["--prompts", str(a.answers), "--tokens", str(a.answers_tokens), "--seed", str(a.seed)]
        rc = run_capped(argv, work / f"answers_{server.role}.log", env_with({}), ANSWERS_RESERVE_S / 2, log)
        if rc == 0 and part.exists():
            doc[server.role] = json.loads(part.read_text(encoding="utf-8"))
            keys = ("prompts", "cached_hits", "cached_equal", "first_token_equal", "sensitive")
            log(f"answers {server.role}: " + json.dumps({k: doc[server.role][k] for k in keys}))
        else:
            log(f"answers {server.role}: exit {rc}")
    dest.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return {r: {k: v for k, v in d.items() if k != "rows"} for r, d in doc.items()}


def _finish(
    out: Path, work: Path, summary: dict[str, Any], log: Log, python: str = "", env: dict[str, str] | None = None
) -> int:
    """Analysis and the files of the output folder; the exit code says whether `check` left its document."""
    evidence, ok = work / "evidence", (out / "check.json").exists()
    if ok and env is not None:
        ins = subprocess.run(
            spec.inspect_argv(python, str(work / "vllm_A_before.prom"), str(work / "vllm_A_metrics.prom")),
            capture_output=True,
            text=True,
            env=env,
        )
        (work / "inspect_A.json").write_text(ins.stdout or ins.stderr, encoding="utf-8")
    if (evidence / "requests.jsonl").exists():
        (out / "requests.jsonl").write_bytes((evidence / "requests.jsonl").read_bytes())
        try:
            result = clusters.analyze(evidence)
            (out / "clusters.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
            log("cluster analysis (product vs harness, per level):\n" + clusters.table(result))
        except (OSError, ValueError, KeyError) as e:
            log(f"cluster analysis failed: {e!r}")
        with tarfile.open(out / "evidence.tgz", "w:gz") as tar:
            tar.add(evidence, arcname="evidence")
    metrics = ["vllm_A_before.prom", "vllm_A_metrics.prom", "vllm_B_metrics.prom", "exporter_metrics.prom"]
    _pack(out / "metrics.tgz", [work / n for n in (*metrics, "inspect_A.json", "proc_A.txt")])
    summary["wall_s"] = round(log.elapsed(), 1)
    text = json.dumps(summary, indent=1) + "\n"
    places = [(work, "<work>"), (out.resolve(), "<out>"), (out, "<out>"), (REPO, "<repo>")]
    for path, name in [*places, *([(python, "<python>")] if os.sep in python else [])]:
        text = text.replace(str(path), name)  # the summary is recorded evidence: no machine paths in it
    (out / "summary.json").write_text(text, encoding="utf-8")
    _pack(out / "logs.tgz", sorted(work.glob("*.log")))
    return 0 if ok else 12


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("out", type=Path, help="output folder (created; must be empty)")
    p.add_argument("shape", choices=sorted(spec.SHAPES))
    p.add_argument("--rehearse", action="store_true", help="the product's simulator in place of vLLM")
    p.add_argument("--levels", default=spec.Sweep.levels, help="check --concurrency")
    p.add_argument("--min-bursts", type=int, default=spec.Sweep.min_bursts)
    p.add_argument("--rounds", type=int, default=spec.Sweep.rounds)
    p.add_argument("--min-samples", type=int, default=spec.Sweep.min_samples)
    p.add_argument("--settle", type=float, help="check --settle (default: the product's)")
    p.add_argument("--deadline", type=float, default=540.0, help="seconds for the whole run (default 540)")
    p.add_argument("--health-timeout", type=float, default=300.0, help="seconds for each server to come up")
    p.add_argument("--python", default=sys.executable, help="interpreter of vLLM and of the product")
    p.add_argument("--site", help="folder with an unpacked offline vLLM bundle, put on the servers' PYTHONPATH")
    p.add_argument("--ports", type=int, nargs=3, metavar=("A", "B", "EXPORTER"))
    p.add_argument("--time-scale", type=float, default=1.0, help="rehearsal: wall seconds per simulated second")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--weights",
        choices=("dummy", "seeded"),
        default="dummy",
        help="dummy: --load-format dummy; seeded: a checkpoint of seeded random weights (weights.py)",
    )
    p.add_argument("--qk-gain", type=float, default=3.0, help="seeded weights: query/key norm gain")
    p.add_argument(
        "--answers",
        type=int,
        default=0,
        metavar="N",
        help="after check: N prompts of answers.py on each server (0: none)",
    )
    p.add_argument("--answers-tokens", type=int, default=2048, help="prompt length of answers.py")
    a = p.parse_args(argv)
    a.ports = a.ports or [*(s.port for s in spec.SERVERS), spec.EXPORTER_PORT]
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    if a.out.exists() and any(a.out.iterdir()):
        print(f"gpuref: {a.out} is not empty; name a new output folder", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpuref-") as tmp:
        work = Path(tmp)
        log = Log(work / "run.log")
        log(f"gpuref {a.shape}{' (rehearsal)' if a.rehearse else ''} -> {a.out}")
        try:
            return execute(a, a.out, work, log)
        except KeyboardInterrupt:
            log("interrupted")
            return 130


if __name__ == "__main__":
    sys.exit(main())
