#!/usr/bin/env python3
"""GPU-machine side of the H200 burst (stdlib only): bundle loading, real vLLM servers, the product's
`check`, the /metrics chain and the concurrency sweep. Called by device.sh, one sub-command a device call:

    burst.py bundle            store the carried chunk(s), rebuild and unpack every part that is complete
    burst.py prepare           machine facts, import test of the bundle, compileall, exporter preflight
    burst.py run PRESET        A (connector, :8000) + B (no connector, :8001) side by side; /metrics chain on
                               both; the product's `check`; the concurrency sweep; final scrapes; pack into $OUT
    burst.py check PRESET      A + B and the product's `check` only (G033_CHECK_ARGS may add --concurrency ...)
    burst.py stop              kill the process groups an interrupted run left

Why a sweep of its own: the product's `check` (at the time of this run) measures one request at a time; the
question here is how the payoff moves with concurrency. Each sweep round displaces the shared prefix
from both servers' GPU caches (3 fresh 6000-token prompts each), then sends a burst of c concurrent
revisits (shared prefix + a distinct 64-token tail each) to A and to B, in alternating order. Client TTFT =
time to the first streamed `data:` line. Every request is kept raw (sweep.jsonl).

Environment: G033_STORE (<tempdir>/g033: only the temp dir survives between device calls), OUT, PYTHON,
G033_T0 (deadline base), G033_DEADLINE_S (560),
G033_LEVELS (1,8,32), G033_ROUNDS (12), G033_PREFIX (5120), G033_TAIL (64), G033_CHECK_ROUNDS (10),
G033_CHECK_TIMEOUT (240), G033_CHECK_ARGS (template: {target} {control} {rounds} {json} {evidence}),
G033_SWEEP (1), G033_CHECK (1), MOCK=1 (the project's simulator instead of vLLM, for rehearsals).
"""

import contextlib
import gzip
import http.client
import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

from chunks import sha256  # the MANIFEST checksums: the same function that wrote them (same folder)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.getcwd()  # device.sh runs from the repository root (the product runs from there)
STORE = os.path.abspath(os.environ.get("G033_STORE") or os.path.join(tempfile.gettempdir(), "g033"))
SITE = os.path.join(STORE, "site")
OUT = os.path.abspath(os.environ.get("OUT") or os.path.join(tempfile.gettempdir(), "g033_out"))
PY = os.environ.get("PYTHON") or sys.executable
T0 = float(os.environ.get("G033_T0") or time.time())
DEADLINE = T0 + float(os.environ.get("G033_DEADLINE_S", "560"))
MOCK = os.environ.get("MOCK") == "1"
PGIDS = os.path.join(STORE, "pgids")
PORT_A, PORT_B = int(os.environ.get("G033_PORT_A", "8000")), int(os.environ.get("G033_PORT_B", "8001"))
TAG = time.strftime("%H%M%S")

PRESETS = {
    "0.6b": {
        "dir": "model-0.6b",
        "served": "Qwen/Qwen3-0.6B",
        "util": 0.4,
        "cpu_bytes": 8_000_000_000,
        "sim": "h200-qwen3-0.6b",
    },
    "14b": {
        "dir": "model-14b",
        "served": "Qwen/Qwen3-14B",
        "util": 0.45,
        "cpu_bytes": 16_000_000_000,
        "sim": "h200-qwen3-32b",
    },
}
os.makedirs(OUT, exist_ok=True)
os.makedirs(STORE, exist_ok=True)
SUMMARY = {"t0": T0, "events": []}


def log(*a):
    line = f"[{time.time() - T0:6.1f}s] " + " ".join(str(x) for x in a)
    print(line, flush=True)
    SUMMARY["events"].append(line)


def left():
    return DEADLINE - time.time()


def sh(cmd, timeout=60):
    try:
        p = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=timeout, check=False)
        return (p.stdout + p.stderr).strip()
    except Exception as e:
        return repr(e)


# ------------------------------------------------------------------------------------------ bundle
def read_manifest(path):
    chunks, parts, build = {}, [], None
    with open(path) as fh:
        lines = fh.read().splitlines()
    for line in lines:
        w = line.split()
        if not w or w[0].startswith("#"):
            continue
        if w[0] == "build":
            build = w[1]
        elif w[0] == "chunk":
            chunks[int(w[1])] = (int(w[2]), int(w[3]), w[4])  # index -> (offset, size, sha)
        elif w[0] == "part":
            parts.append((w[1], int(w[2]), int(w[3]), w[4]))  # name, offset, size, sha
    return build, chunks, parts


def _wipe_other_build(build):
    """A store holding another build's chunks would mix two bundles: start it over."""
    man = os.path.join(STORE, "MANIFEST")
    if os.path.exists(man) and read_manifest(man)[0] != build:
        log("store holds another build: wiping chunks and site")
        for d in ("chunks", "site", "over"):
            shutil.rmtree(os.path.join(STORE, d), ignore_errors=True)
        for f in ("done_parts", "marker"):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(STORE, f))


def _store_chunks(carried, cdir, chunks):
    """Copy the carried chunks into the store; False on the first checksum mismatch."""
    for name in sorted(os.listdir(carried)):
        m = re.fullmatch(r"chunk\.(\d+)", name)
        if not m:
            continue
        i = int(m.group(1))
        dst = os.path.join(cdir, name)
        shutil.copyfile(os.path.join(carried, name), dst)
        ok = sha256(dst) == chunks[i][2]
        log(f"chunk {i}: {os.path.getsize(dst)} B sha256 {'OK' if ok else 'MISMATCH'}")
        if not ok:
            return False
    return True


def _unpack_part(cdir, chunks, span, part):
    """Rebuild one part from its chunks and untar it into the store; False when it fails."""
    pname, poff, psize, psha = part
    tmp = os.path.join(STORE, pname)
    with open(tmp, "wb") as out:
        for i in sorted(span):
            off, sz, _s = chunks[i]
            with open(os.path.join(cdir, f"chunk.{i}"), "rb") as f:
                lo, hi = max(poff, off), min(poff + psize, off + sz)
                f.seek(lo - off)
                out.write(f.read(hi - lo))
    if sha256(tmp) != psha:
        log(f"part {pname}: sha256 MISMATCH")
        return False
    t = time.time()
    rc = subprocess.run(["tar", "-xJf", tmp, "-C", STORE], check=False).returncode
    os.remove(tmp)
    log(f"part {pname}: unpacked rc={rc} in {time.time() - t:.1f}s")
    return not rc


def cmd_bundle(carried):
    """Store carried chunks under STORE/chunks; rebuild + unpack each part whose bytes are all there."""
    man_src = os.path.join(carried, "MANIFEST")
    if not os.path.exists(man_src):
        log("no MANIFEST carried in", carried)
        return 2
    build, chunks, parts = read_manifest(man_src)
    _wipe_other_build(build)
    shutil.copy(man_src, os.path.join(STORE, "MANIFEST"))
    cdir = os.path.join(STORE, "chunks")
    os.makedirs(cdir, exist_ok=True)
    if not _store_chunks(carried, cdir, chunks):
        return 2
    have = {i for i in chunks if os.path.exists(os.path.join(cdir, f"chunk.{i}"))}
    done_f = os.path.join(STORE, "done_parts")
    done = set(Path(done_f).read_text().split()) if os.path.exists(done_f) else set()
    for part in parts:
        pname, poff, psize, _psha = part
        if pname in done:
            continue
        span = [i for i, (off, sz, _s) in chunks.items() if off < poff + psize and off + sz > poff]
        if not set(span) <= have:
            log(f"part {pname}: waiting for chunks {sorted(set(span) - have)}")
            continue
        if not _unpack_part(cdir, chunks, span, part):
            return 2
        done.add(pname)
        with open(done_f, "w") as f:
            f.write(" ".join(sorted(done)) + "\n")
    missing = [p[0] for p in parts if p[0] not in done]
    log("parts unpacked:", sorted(done), "missing:", missing)
    if not missing:
        shutil.rmtree(cdir, ignore_errors=True)
    with open(os.path.join(STORE, "marker"), "w") as f:
        f.write(f"{build} {time.time():.0f}\n")
    return 0 if not missing else 4


def cmd_prepare():
    print(sh("nvidia-smi -L; nvidia-smi --query-gpu=driver_version,memory.total,memory.used --format=csv,noheader"))
    print(sh("uname -r; nproc; free -g | head -2; df -h /tmp | tail -1"))
    code = (
        "import importlib.metadata as m, sys\nprint(sys.version)\n"
        "for n in 'torch triton transformers numpy aiohttp prometheus-client psutil PyYAML nvidia-ml-py'.split():\n"
        "    try: print(f'  {n}=={m.version(n)}')\n    except Exception as e: print(f'  {n}: {e!r}')\n"
    )
    print(sh(f"{PY} -c {shlex.quote(code)}"))
    deps = "pydantic fastapi uvicorn openai zmq msgspec xgrammar cbor2 blake3 opentelemetry.sdk.trace".split()
    code = f"import importlib\nfor m in {deps!r}:\n    importlib.import_module(m)\nprint('imports ok')\n"
    env = dict(os.environ, PYTHONPATH=SITE)
    t = time.time()
    p = subprocess.run([PY, "-c", code], capture_output=True, text=True, env=env, check=False, timeout=180)
    log(f"import test rc={p.returncode} ({time.time() - t:.1f}s) {(p.stdout + p.stderr)[-1500:]}")
    t = time.time()
    subprocess.run([PY, "-m", "compileall", "-q", "-j", "0", SITE], capture_output=True, check=False, timeout=200)
    log(f"compileall {time.time() - t:.1f}s")
    env = dict(os.environ, PYTHONPATH=REPO)
    for sub in ("check", "serve"):
        p = subprocess.run([PY, "-m", "exporter", sub, "--help"], capture_output=True, text=True, env=env, check=False)
        log(f"exporter {sub} --help rc={p.returncode}" + ("" if p.returncode == 0 else p.stderr[-800:]))
    return 0


# -------------------------------------------------------------------------------------------- http
def http_get(port, path, timeout=10):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read().decode("utf-8", "replace")
    except Exception as e:
        return None, repr(e)
    finally:
        c.close()


def complete(port, served, tokens, kv=None, timeout=300):
    """Streaming /v1/completions, max_tokens 1; TTFT = first `data:` line (client side)."""
    body = {
        "model": served,
        "prompt": tokens,
        "max_tokens": 1,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if kv is not None:
        body["kv_transfer_params"] = kv
    res = {"prompt_len": len(tokens)}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = json.dumps(body).encode()
        t0 = time.perf_counter()
        res["t_send"] = time.time()
        c.request("POST", "/v1/completions", body=data, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            res.update(ok=False, status=r.status, error=r.read().decode("utf-8", "replace")[:500])
            return res
        ttft = None
        for line in r:
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                break
            if ttft is None:
                ttft = time.perf_counter() - t0
            with contextlib.suppress(ValueError):
                obj = json.loads(payload)
                if obj.get("usage"):
                    res["cached_tokens"] = (obj["usage"].get("prompt_tokens_details") or {}).get("cached_tokens")
                if obj.get("metrics"):
                    res["server_metrics"] = obj["metrics"]
                if obj.get("error"):
                    res["error"] = obj["error"]
        res["total_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
        res["ttft_ms"] = None if ttft is None else round(ttft * 1e3, 3)
        res["ok"] = ttft is not None and "error" not in res
        return res
    except Exception as e:
        res.update(ok=False, error=repr(e))
        return res
    finally:
        c.close()


# ---------------------------------------------------------------------------------- process groups
def record_pgid(pid):
    with open(PGIDS, "a") as f:
        f.write(f"{pid}\n")


def kill_group(pid, sig):
    try:
        os.killpg(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def stop_proc(proc, name):
    if proc is None:
        return
    if proc.poll() is None:
        kill_group(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            kill_group(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
    kill_group(proc.pid, signal.SIGKILL)
    log(f"{name} stopped rc={proc.returncode}")


def cmd_stop():
    if os.path.exists(PGIDS):
        for line in Path(PGIDS).read_text().split():
            if kill_group(int(line), signal.SIGKILL):
                log("killed stale process group", line)
        os.remove(PGIDS)
    return 0


# ------------------------------------------------------------------------------------------ servers
class Server:
    def __init__(self, phase, port, preset, work):
        self.phase, self.port, self.p = phase, port, PRESETS[preset]
        self.served = self.p["served"]
        self.tag = f"{preset}_{phase}"
        self.log_path = os.path.join(work, f"server_{self.tag}.log")
        self.proc = None

    def kv_config(self):
        return {
            "kv_connector": "OffloadingConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {"block_size": 64, "cpu_bytes_to_use": self.p["cpu_bytes"]},
        }

    def cmd(self):
        if MOCK:
            c = [
                PY,
                "-m",
                "exporter",
                "simulate",
                "--listen",
                f"127.0.0.1:{self.port}",
                "--duration",
                "1200",
                "--calibration",
                self.p["sim"],
                "--model",
                self.served,
                "--seed",
                str(self.port),
            ]
            return c + (["--no-connector"] if self.phase == "B" else [])
        c = [
            PY,
            "-m",
            "vllm.entrypoints.cli.main",
            "serve",
            os.path.join(HERE, self.p["dir"]),
            "--served-model-name",
            self.served,
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
            "--gpu-memory-utilization",
            str(self.p["util"]),
            "--max-num-seqs",
            "64",
            "--enable-prompt-tokens-details",
            "--enable-per-request-metrics",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        if self.phase == "A":
            c += ["--kv-transfer-config", json.dumps(self.kv_config(), separators=(",", ":"))]
        return c

    def env(self):
        env = dict(os.environ)
        env["PYTHONPATH"] = (REPO if MOCK else SITE) + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.update(
            {
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1",
                "VLLM_USE_FLASHINFER_SAMPLER": "0",
                "VLLM_LOGGING_LEVEL": "INFO",
                "PYTHONUNBUFFERED": "1",
                "TOKENIZERS_PARALLELISM": "false",
                "TRITON_CACHE_DIR": os.path.join(STORE, "cache", "triton"),
                "VLLM_CACHE_ROOT": os.path.join(STORE, "cache", "vllm"),
            }
        )
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        return env

    def start(self):
        cmd = self.cmd()
        log(f"start {self.tag}: {shlex.join(cmd)[-400:]}")
        self.logf = open(self.log_path, "w")  # noqa: SIM115 (held by the child)
        self.logf.write("# cmd: " + shlex.join(cmd) + "\n")
        self.logf.flush()
        self.t0 = time.time()
        self.proc = subprocess.Popen(
            cmd, stdout=self.logf, stderr=subprocess.STDOUT, env=self.env(), cwd=REPO, process_group=0
        )
        record_pgid(self.proc.pid)
        SUMMARY.setdefault("servers", {})[self.tag] = {"cmd": shlex.join(cmd), "port": self.port}

    def wait_healthy(self, timeout):
        end = time.time() + timeout
        while time.time() < end:
            if self.proc.poll() is not None:
                log(f"{self.tag} EXITED rc={self.proc.returncode}")
                print(
                    sh(
                        f"grep -E 'Error|Traceback|error' {shlex.quote(self.log_path)} | tail -20; "
                        f"tail -25 {shlex.quote(self.log_path)}"
                    ),
                    flush=True,
                )
                return False
            st, _ = http_get(self.port, "/health", timeout=2)
            if st == 200:
                ready = round(time.time() - self.t0, 1)
                SUMMARY["servers"][self.tag]["ready_s"] = ready
                log(f"{self.tag} healthy after {ready}s")
                return True
            time.sleep(1.0)
        log(f"{self.tag} not healthy in {timeout:.0f}s")
        print(sh(f"tail -25 {shlex.quote(self.log_path)}"), flush=True)
        return False

    def metrics(self, path=None):
        st, text = http_get(self.port, "/metrics", timeout=15)
        if st == 200 and path:
            with open(path, "w") as f:
                f.write(text)
        return text if st == 200 else ""

    def stop(self):
        if self.proc is not None:
            stop_proc(self.proc, self.tag)
            self.logf.close()
            self.proc = None


# ------------------------------------------------------------------------------------------ workload
RNG = random.Random(20261201)


def toks(n):
    return [RNG.randrange(1000, 150000) for _ in range(n)]


KEYS = (
    "vllm:kv_offload_load_bytes_total",
    "vllm:kv_offload_store_bytes_total",
    "vllm:external_prefix_cache_hits_total",
    "vllm:external_prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:num_preemptions_total",
    "vllm:kv_offload_load_time_total",
    "vllm:prompt_tokens_total",
)


def counters(text):
    out = {}
    for line in text.splitlines():
        for k in KEYS:
            if line.startswith(k + "{") or line.startswith(k + " "):
                with contextlib.suppress(ValueError, IndexError):
                    out[k] = out.get(k, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def cdelta(a, b):
    return {k.split(":", 1)[1]: round(b.get(k, 0.0) - a.get(k, 0.0), 6) for k in KEYS if b.get(k) != a.get(k)}


def flushed(srv, tokens):
    r = complete(srv.port, srv.served, tokens)
    time.sleep(0.5)
    complete(srv.port, srv.served, toks(4))
    time.sleep(0.5)
    return r


def chain(servers, cdir):
    """/metrics before, after a seeded prefix is stored, after displacement, after it is loaded back."""
    P = toks(6000)
    res = {}
    for s in servers:
        steps = []
        s.metrics(os.path.join(cdir, f"{s.tag}_00_initial.prom"))
        steps.append(("cold_store", flushed(s, P)))
        s.metrics(os.path.join(cdir, f"{s.tag}_01_after_store.prom"))
        for _ in range(2):
            complete(s.port, s.served, toks(6000))
        steps.append(("pressure", flushed(s, toks(6000))))
        s.metrics(os.path.join(cdir, f"{s.tag}_02_after_displace.prom"))
        steps.append(("revisit_load", flushed(s, P)))
        s.metrics(os.path.join(cdir, f"{s.tag}_03_after_load.prom"))
        res[s.tag] = [
            {"step": n, **{k: r.get(k) for k in ("ok", "ttft_ms", "cached_tokens", "error")}} for n, r in steps
        ]
        log(f"chain {s.tag}: " + json.dumps(res[s.tag]))
    return res


def burst(srv, prefix, c, tail):
    """c concurrent requests prefix + a distinct tail, released together by a barrier."""
    prompts = [prefix + toks(tail) for _ in range(c)]
    out = [None] * c
    bar = threading.Barrier(c)

    def one(i):
        bar.wait()
        out[i] = complete(srv.port, srv.served, prompts[i])

    th = [threading.Thread(target=one, args=(i,)) for i in range(c)]
    t = time.time()
    for x in th:
        x.start()
    for x in th:
        x.join()
    return out, round((time.time() - t) * 1e3, 3)


def displace(servers):
    """3 fresh 6000-token prompts on each server, in parallel (not measured)."""

    def run(s):
        for _ in range(3):
            complete(s.port, s.served, toks(6000))

    th = [threading.Thread(target=run, args=(s,)) for s in servers]
    for x in th:
        x.start()
    for x in th:
        x.join()
    time.sleep(0.5)


def sweep(a, b, sdir):
    levels = [int(x) for x in os.environ.get("G033_LEVELS", "1,8,32").split(",")]
    rounds = int(os.environ.get("G033_ROUNDS", "12"))
    plen, tail = int(os.environ.get("G033_PREFIX", "5120")), int(os.environ.get("G033_TAIL", "64"))
    rows, fout = [], open(os.path.join(sdir, "sweep.jsonl"), "w")  # noqa: SIM115
    for li, c in enumerate(levels):
        budget = (left() - 40) / (len(levels) - li)
        t_level = time.time()
        prefix = toks(plen)
        for s in (a, b):  # seed: the prefix is computed (and on A stored to the CPU tier)
            flushed(s, prefix + toks(tail))
        done = 0
        for r in range(rounds):
            if time.time() - t_level > budget and done >= 3:
                log(f"c={c}: level budget {budget:.0f}s used after {done} rounds")
                break
            displace((a, b))
            order = (a, b) if r % 2 == 0 else (b, a)
            for s in order:
                before = counters(s.metrics())
                reqs, wall = burst(s, prefix, c, tail)
                time.sleep(0.3)
                after = counters(s.metrics())
                row = {
                    "level": c,
                    "round": r,
                    "path": "offload" if s is a else "control",
                    "server": s.tag,
                    "first": s is order[0],
                    "burst_wall_ms": wall,
                    "metrics_delta": cdelta(before, after),
                    "requests": reqs,
                }
                fout.write(json.dumps(row) + "\n")
                fout.flush()
                rows.append(row)
            done += 1
            ra = [x for x in rows if x["level"] == c and x["round"] == r]
            msg = " ".join(
                f"{x['path']}: med {med([q['ttft_ms'] for q in x['requests'] if q.get('ok')])} ms "
                f"ok {sum(1 for q in x['requests'] if q.get('ok'))}/{c} "
                f"load_B {x['metrics_delta'].get('kv_offload_load_bytes_total', 0):.0f} "
                f"ext_hits {x['metrics_delta'].get('external_prefix_cache_hits_total', 0):.0f}"
                for x in ra
            )
            log(f"c={c} r={r}: {msg}")
        log(f"c={c}: {done} rounds in {time.time() - t_level:.1f}s")
    fout.close()
    return rows


def med(v):
    v = sorted(x for x in v if x is not None)
    if not v:
        return None
    n = len(v)
    return round(v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2, 1)


# --------------------------------------------------------------------------------------------- check
def run_check(a, b, work):
    tmpl = os.environ.get("G033_CHECK_ARGS") or (
        "check --target {target} --control-target {control} --rounds {rounds} --allow-pressure "
        "--json {json} --out {evidence}"
    )
    kw = {
        "target": f"http://127.0.0.1:{a.port}",
        "control": f"http://127.0.0.1:{b.port}",
        "rounds": os.environ.get("G033_CHECK_ROUNDS", "10"),
        "json": os.path.join(work, "check.json"),
        "evidence": os.path.join(work, "evidence"),
    }
    s = tmpl
    for k, v in kw.items():
        s = s.replace("{" + k + "}", v)
    argv = [PY, "-m", "exporter", *shlex.split(s)]
    cap = min(float(os.environ.get("G033_CHECK_TIMEOUT", "240")), max(30.0, left() - 60))
    log(f"check (cap {cap:.0f}s): {shlex.join(argv[1:])}")
    env = dict(os.environ, PYTHONPATH=REPO, PYTHONUNBUFFERED="1")
    t = time.time()
    with open(os.path.join(work, "check.log"), "w") as lf:
        p = subprocess.Popen(argv, stdout=lf, stderr=subprocess.STDOUT, env=env, cwd=REPO, process_group=0)
        record_pgid(p.pid)
        try:
            rc = p.wait(timeout=cap)
        except subprocess.TimeoutExpired:
            kill_group(p.pid, signal.SIGINT)
            time.sleep(3)
            kill_group(p.pid, signal.SIGKILL)
            rc = "timeout"
    log(f"check rc={rc} in {time.time() - t:.1f}s")
    print(sh(f"tail -30 {shlex.quote(os.path.join(work, 'check.log'))}"), flush=True)
    SUMMARY["check"] = {"argv": argv[1:], "rc": rc, "wall_s": round(time.time() - t, 1)}
    return rc


# ----------------------------------------------------------------------------------------------- run
def pack(name, src, files=None):
    with tarfile.open(os.path.join(OUT, name), "w:gz") as tf:
        for f in files if files is not None else sorted(os.listdir(src)):
            p = os.path.join(src, f)
            if os.path.exists(p):
                tf.add(p, arcname=f)


def trim(path, limit=1_200_000):
    with contextlib.suppress(OSError):
        data = Path(path).read_bytes()
        if len(data) > limit:
            with open(path, "wb") as f:
                f.write(data[: limit // 3] + b"\n...[trimmed]...\n" + data[-(2 * limit) // 3 :])


def cmd_run(preset, mode):
    if not MOCK and not os.path.isdir(os.path.join(SITE, "vllm")):
        log("bundle not unpacked (no site/vllm): start again from step 1")
        return 3
    cmd_stop()
    work = os.path.join(STORE, "work", f"{preset}-{mode}-{TAG}")
    cdir, sdir = os.path.join(work, "chain"), os.path.join(work, "sweep")
    for d in (cdir, sdir):
        os.makedirs(d, exist_ok=True)
    SUMMARY.update(preset=preset, mode=mode, levels=os.environ.get("G033_LEVELS", "1,8,32"))
    a, b = Server("A", PORT_A, preset, work), Server("B", PORT_B, preset, work)
    try:
        return _run_servers(a, b, mode, work, cdir, sdir)
    finally:
        a.stop()
        b.stop()
        _collect(a, b, preset, work, cdir, sdir)


def _run_servers(a, b, mode, work, cdir, sdir):
    """Start both servers, smoke them, then the chain, the check and the sweep the mode asks for."""
    rc = 0
    a.start()
    if not a.wait_healthy(min(300, left() - 60)):
        return 10
    b.start()  # after A is healthy: vLLM's memory profiling must not see another process free memory
    if not b.wait_healthy(min(240, left() - 60)):
        return 11
    for s in (a, b):
        r = complete(s.port, s.served, toks(64))
        log(f"smoke {s.tag}: ok={r.get('ok')} ttft={r.get('ttft_ms')} err={str(r.get('error'))[:200]}")
        SUMMARY["servers"][s.tag]["version"] = http_get(s.port, "/version")[1][:200]
    SUMMARY["gpu_after_start"] = sh("nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader")
    SUMMARY["host_after_start"] = sh("free -m | head -2")
    if mode == "run":
        SUMMARY["chain"] = chain((a, b), cdir)
    if os.environ.get("G033_CHECK", "1") == "1":
        crc = run_check(a, b, work)
        rc = 0 if crc in (0, 1, 2) else 12
    if mode == "run" and os.environ.get("G033_SWEEP", "1") == "1":
        sweep(a, b, sdir)
    for s in (a, b):
        s.metrics(os.path.join(cdir, f"{s.tag}_99_final.prom"))
    return rc


def _collect(a, b, preset, work, cdir, sdir):
    """Summary, trimmed logs and the packed results into OUT, whatever happened before."""
    SUMMARY["wall_s"] = round(time.time() - T0, 1)
    with open(os.path.join(work, "summary.json"), "w") as f:
        json.dump(SUMMARY, f, indent=1)
    for s in (a, b):
        trim(s.log_path)
    p = f"{preset.replace('.', '')}_"
    pack(p + "chain.tgz", cdir)
    if os.path.exists(os.path.join(sdir, "sweep.jsonl")):
        with (
            open(os.path.join(sdir, "sweep.jsonl"), "rb") as fi,
            gzip.open(OUT + f"/{p}sweep.jsonl.gz", "wb") as fo,
        ):
            shutil.copyfileobj(fi, fo)
    if os.path.exists(os.path.join(work, "check.json")):
        shutil.copy(os.path.join(work, "check.json"), os.path.join(OUT, p + "check.json"))
    if os.path.isdir(os.path.join(work, "evidence")):
        pack(p + "evidence.tgz", os.path.join(work, "evidence"))
    pack(p + "logs.tgz", work, ["summary.json", "check.log", f"server_{a.tag}.log", f"server_{b.tag}.log"])


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""

    def on_term(_s, _f):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    if cmd == "bundle":
        return cmd_bundle(sys.argv[2])
    if cmd == "prepare":
        return cmd_prepare()
    if cmd in ("run", "check"):
        return cmd_run(sys.argv[2], cmd)
    if cmd == "stop":
        return cmd_stop()
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
