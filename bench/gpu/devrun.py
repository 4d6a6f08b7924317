#!/usr/bin/env python3
"""GPU-machine orchestrator of the H200 reference run (stdlib only; called by device_step.sh).

    devrun.py prepare   machine facts, import test of the bundle (writes $KVO_STORE/pythonpath),
                        bytecode pre-compilation of the bundle, exporter preflight
    devrun.py run06     Qwen3-0.6B shape: vLLM phase A (OffloadingConnector CPU tier) on :8000 and
                        phase B (no connector) on :8001 side by side, the exporter's `serve` against
                        both and its `check` (A = target, B = control), a short built-in canary,
                        final scrapes; everything packed into $OUT
    devrun.py run32     Qwen3-32B shape: KVO_32B_MODE=auto (default) tries A and B side by side at
                        KVO_32B_PAIR_UTIL (0.49) each and falls back to seq; seq = A alone, then B
                        alone, at 0.9, with single-target serve/check
    devrun.py stop      kill the process groups an earlier (interrupted) run left behind

The exporter invocation (templates KVO_SERVE_ARGS / KVO_CHECK_ARGS, command KVO_EXPORTER) is set in ONE
place: the marked block at the top of device_step.sh. Placeholders: {targets} {target} {control}
{listen} {rounds} {json} {evidence}.

Environment (device_step.sh sets the first four):
  KVO_STORE (/tmp/kvo_store)  unpacked bundle: site/ over/ xdeps/, pythonpath, exporter_pythonpath
  OUT                         files that come back (max 8 files); default /tmp/kvo_out
  KVO_T0                      epoch seconds when the device command started (deadline base)
  PYTHON                      interpreter for vLLM and the exporter (the machine's python3)
  KVO_DEADLINE_S (560)        everything is packed before KVO_T0 + this
  KVO_CHECK_TIMEOUT (300)     cap for one `check` run;  KVO_ROUNDS (10), KVO_ROUNDS_32B (10)
  KVO_CANARY (1)              run the built-in canary after the check (0: off)
  KVO_SCRAPE_EVERY (5)        exporter /metrics snapshot period during the run (seconds)
  KVO_GPU_UTIL_06 (0.4)       --gpu-memory-utilization of each 0.6B server
  KVO_PORT_A (8000), KVO_PORT_B (8001), KVO_LISTEN (127.0.0.1:9400)
  KVO_32B_MODE (auto|pair|seq), KVO_32B_PAIR_UTIL (0.49), KVO_32B_SEQ_UTIL (0.9)
  KVO_COMPILE_JOBS (0 = all cores), KVO_COMPILEALL (1)
  MOCK=1                      local test: localtest/mock_vllm.py instead of vLLM, no nvidia-smi
"""

import contextlib
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
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
STORE = os.path.abspath(os.environ.get("KVO_STORE", "/tmp/kvo_store"))
SITE, OVER, XDEPS = (os.path.join(STORE, d) for d in ("site", "over", "xdeps"))
OUT = os.path.abspath(os.environ.get("OUT") or "/tmp/kvo_out")
PY = os.environ.get("PYTHON") or sys.executable
T0 = float(os.environ.get("KVO_T0") or time.time())
DEADLINE = T0 + float(os.environ.get("KVO_DEADLINE_S", "560"))
MOCK = os.environ.get("MOCK") == "1"
CMD = sys.argv[1] if len(sys.argv) > 1 else "run06"
WORK = os.path.join(STORE, "work", f"{CMD}-{time.strftime('%H%M%S')}")
PGIDS = os.path.join(STORE, "pgids")
LISTEN = os.environ.get("KVO_LISTEN", "127.0.0.1:9400")
PORT_A = int(os.environ.get("KVO_PORT_A", "8000"))
PORT_B = int(os.environ.get("KVO_PORT_B", "8001"))
RESERVE_S = 30  # kept free at the end for stopping and packing

MODELS = {
    "0.6b": {"dir": os.path.join(HERE, "model-0.6b"), "served": "Qwen/Qwen3-0.6B", "cpu_bytes": 8_000_000_000},
    "32b": {"dir": os.path.join(HERE, "model-32b"), "served": "Qwen/Qwen3-32B", "cpu_bytes": 16_000_000_000},
}

os.makedirs(OUT, exist_ok=True)
os.makedirs(STORE, exist_ok=True)
SUMMARY = {"cmd": CMD, "t0": T0, "events": []}


def log(*a):
    line = f"[{time.time() - T0:6.1f}s] " + " ".join(str(x) for x in a)
    print(line, flush=True)
    SUMMARY["events"].append(line)


def left():
    return DEADLINE - time.time()


def sh(cmd, timeout=30):
    try:
        p = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=timeout, check=False)
        return (p.stdout + p.stderr).strip()
    except Exception as e:
        return repr(e)


# ------------------------------------------------------------------------------------------ http
def http_req(port, path, method="GET", body=None, timeout=10, host="127.0.0.1"):
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        hdr = {"Content-Type": "application/json"} if body is not None else {}
        c.request(method, path, body=body, headers=hdr)
        r = c.getresponse()
        return r.status, r.read().decode("utf-8", "replace")
    finally:
        c.close()


def try_get(port, path, timeout=10, host="127.0.0.1"):
    try:
        return http_req(port, path, timeout=timeout, host=host)
    except Exception as e:
        return None, repr(e)


def complete(port, served, tokens, salt=None, timeout=180):
    """Streaming /v1/completions, max_tokens 1; client TTFT = first `data:` line."""
    body = {
        "model": served,
        "prompt": tokens,
        "max_tokens": 1,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if salt is not None:
        body["cache_salt"] = salt
    res = {"prompt_len": len(tokens), "salt": salt}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        t0 = time.perf_counter()
        c.request(
            "POST", "/v1/completions", body=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        r = c.getresponse()
        if r.status != 200:
            res.update(ok=False, status=r.status, error=r.read().decode("utf-8", "replace")[:1000])
            return res
        ttft = None
        while True:
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                break
            if ttft is None:
                ttft = time.perf_counter() - t0
            try:
                obj = json.loads(payload)
            except ValueError:
                continue
            if obj.get("error"):
                res["error"] = obj["error"]
            if obj.get("usage"):
                res["usage"] = obj["usage"]
            if obj.get("metrics"):
                res["server_metrics"] = obj["metrics"]
        res["ttft_ms"] = None if ttft is None else round(ttft * 1e3, 3)
        res["ok"] = ttft is not None and "error" not in res
        return res
    except Exception as e:
        res.update(ok=False, error=repr(e))
        return res
    finally:
        c.close()


# ------------------------------------------------------------------------------- process groups
def record_pgid(pid):
    with open(PGIDS, "a") as f:
        f.write(f"{pid}\n")


def kill_group(pid, sig):
    try:
        os.killpg(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def stop_proc(proc, name, grace=20):
    if proc is None:
        return
    if proc.poll() is None:
        kill_group(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            kill_group(proc.pid, signal.SIGKILL)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
    kill_group(proc.pid, signal.SIGKILL)  # children (engine core) of the group too
    log(f"{name} stopped rc={proc.returncode}")


def kill_stale():
    if not os.path.exists(PGIDS):
        return
    with open(PGIDS) as f:
        lines = f.read().split()
    for line in lines:
        try:
            pid = int(line.strip())
        except ValueError:
            continue
        if kill_group(pid, signal.SIGKILL):
            log("killed stale process group", pid)
    os.remove(PGIDS)


def gpu_used_mib():
    if MOCK:
        return 0
    out = sh("nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits")
    try:
        return int(out.splitlines()[0].strip())
    except (ValueError, IndexError):
        return None


def wait_gpu_free(limit_mib=4000, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        used = gpu_used_mib()
        if used is None or used < limit_mib:
            return used
        time.sleep(1.0)
    log("GPU memory still in use after", timeout, "s:", gpu_used_mib(), "MiB")
    return None


def machine(tag):
    if MOCK:
        return {}
    snap = {
        "gpu": sh("nvidia-smi --query-gpu=name,memory.used,memory.total,driver_version --format=csv,noheader"),
        "host_mem": sh("free -m | head -2"),
    }
    log(f"machine[{tag}]:", json.dumps(snap))
    SUMMARY.setdefault("machine", {})[tag] = snap
    return snap


def write_text(path, text):
    with open(path, "w") as f:
        f.write(text)


def trimmed_copy(src, dst, limit=1_500_000):
    try:
        with open(src, "rb") as f:
            data = f.read()
    except OSError:
        return
    if len(data) > limit:
        data = data[: limit // 3] + b"\n...[trimmed]...\n" + data[-(2 * limit) // 3 :]
    with open(dst, "wb") as f:
        f.write(data)


def tail(path, n=40, pat=None):
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    if pat:
        lines = [x for x in lines if re.search(pat, x)]
    return [x[:400] for x in lines[-n:]]


# ------------------------------------------------------------------------------------ vLLM server
def bundle_pythonpath():
    f = os.path.join(STORE, "pythonpath")
    return open(f).read().strip() if os.path.exists(f) else SITE


class Server:
    def __init__(self, phase, port, model, util, tag):
        self.phase, self.port, self.model, self.util, self.tag = phase, port, MODELS[model], util, tag
        self.served = self.model["served"]
        self.log_path = os.path.join(WORK, f"server_{tag}.log")
        self.proc, self.ready_s = None, None

    def cmd(self):
        if MOCK:
            return [PY, os.path.join(HERE, "localtest", "mock_vllm.py"), str(self.port), self.phase, self.served]
        c = [
            PY,
            "-m",
            "vllm.entrypoints.cli.main",
            "serve",
            self.model["dir"],
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
            str(self.util),
            "--max-num-seqs",
            "16",
            "--enable-prompt-tokens-details",
            "--enable-per-request-metrics",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        if self.phase == "A":
            kv = {
                "kv_connector": "OffloadingConnector",
                "kv_role": "kv_both",
                "kv_connector_extra_config": {"block_size": 64, "cpu_bytes_to_use": self.model["cpu_bytes"]},
            }
            c += ["--kv-transfer-config", json.dumps(kv, separators=(",", ":"))]
        return c

    def env(self):
        env = dict(os.environ)
        env["PYTHONPATH"] = bundle_pythonpath() + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
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
        st, _ = try_get(self.port, "/health", timeout=2)
        if st is not None:
            log(f"WARNING: something already answers on port {self.port} (status {st}) before {self.tag} starts")
        log(f"start vLLM {self.tag}: port {self.port}, util {self.util}, phase {self.phase}")
        self.logf = open(self.log_path, "w")  # noqa: SIM115 (held by the child process)
        self.logf.write("# cmd: " + shlex.join(cmd) + "\n")
        self.logf.flush()
        self.t0 = time.time()
        self.proc = subprocess.Popen(
            cmd, stdout=self.logf, stderr=subprocess.STDOUT, env=self.env(), cwd=REPO, process_group=0
        )
        record_pgid(self.proc.pid)
        SUMMARY.setdefault("servers", {})[self.tag] = {"cmd": shlex.join(cmd), "port": self.port, "util": self.util}

    def wait_healthy(self, timeout):
        end, last_note = time.time() + timeout, time.time()
        while time.time() < end:
            if self.proc.poll() is not None:
                log(f"vLLM {self.tag} EXITED rc={self.proc.returncode} after {time.time() - self.t0:.1f}s")
                self.dump_failure()
                return False
            st, _ = try_get(self.port, "/health", timeout=2)
            if st == 200 and self.proc.poll() is None:
                self.ready_s = round(time.time() - self.t0, 1)
                log(f"vLLM {self.tag} healthy after {self.ready_s}s")
                SUMMARY["servers"][self.tag]["ready_s"] = self.ready_s
                return True
            if time.time() - last_note > 20:
                last_note = time.time()
                t = tail(self.log_path, 1)
                log(f"  ... {self.tag} waiting ({time.time() - self.t0:.0f}s): {t[-1][:200] if t else ''}")
            time.sleep(1.0)
        log(f"vLLM {self.tag} NOT healthy within {timeout:.0f}s")
        self.dump_failure()
        return False

    def dump_failure(self):
        print(f"----- {self.tag}: error lines -----", flush=True)
        for x in tail(self.log_path, 25, r"Error|error|Traceback|raise|assert|CUDA|memory|No module"):
            print("  " + x, flush=True)
        print(f"----- {self.tag}: last lines -----", flush=True)
        for x in tail(self.log_path, 30):
            print("  " + x, flush=True)

    def smoke(self):
        r = complete(self.port, self.served, [random.Random(7).randrange(1000, 150000) for _ in range(64)])
        log(f"smoke {self.tag}:", json.dumps({k: r.get(k) for k in ("ok", "ttft_ms", "error", "usage")})[:400])
        info = {}
        for path in ("/version", "/v1/models"):
            st, body = try_get(self.port, path)
            info[path] = body[:300] if st == 200 else f"{st} {body[:200]}"
        SUMMARY["servers"][self.tag].update(smoke=r.get("ok"), info=info)
        return bool(r.get("ok"))

    def save_metrics(self, name):
        st, text = try_get(self.port, "/metrics", timeout=10)
        if st == 200:
            with open(name, "w") as f:
                f.write(text)
        return st == 200

    def stop(self):
        if self.proc is not None:
            stop_proc(self.proc, f"vLLM {self.tag}")
            self.logf.close()
            self.proc = None


# ------------------------------------------------------------------------------------ exporter
def exporter_pythonpath():
    f = os.path.join(STORE, "exporter_pythonpath")
    return open(f).read().strip() if os.path.exists(f) else f"{REPO}:{SITE}"


def exporter_env():
    pp = exporter_pythonpath() + (":" + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    return dict(os.environ, PYTHONPATH=pp, PYTHONUNBUFFERED="1")


def exporter_argv(template, which, **kw):
    """KVO_EXPORTER_SERVE / KVO_EXPORTER_CHECK override the command prefix for one sub-command."""
    base = shlex.split(
        os.environ.get(f"KVO_EXPORTER_{which.upper()}") or os.environ.get("KVO_EXPORTER") or f"{PY} -m exporter"
    )
    if not template:
        raise SystemExit("KVO_SERVE_ARGS / KVO_CHECK_ARGS not set (device_step.sh sets them)")
    s = template
    for k, v in kw.items():
        s = s.replace("{" + k + "}", v)
    return base + shlex.split(s)


class Exporter:
    """`serve` in the background plus a thread that snapshots its /metrics every KVO_SCRAPE_EVERY s."""

    def __init__(self, urls, tag):
        self.urls, self.tag = urls, tag
        self.host, port = LISTEN.rsplit(":", 1)
        self.port = int(port)
        self.log_path = os.path.join(WORK, f"exporter_serve_{tag}.log")
        self.snap_dir = os.path.join(WORK, f"exporter_scrapes_{tag}")
        self.proc, self.stop_ev, self.thread, self.n = None, threading.Event(), None, 0

    def start(self):
        argv = exporter_argv(
            os.environ.get("KVO_SERVE_ARGS"),
            "serve",
            targets=" ".join(f"--target {u}" for u in self.urls),
            listen=LISTEN,
        )
        log("exporter serve:", shlex.join(argv))
        SUMMARY.setdefault("exporter", {})[f"serve_{self.tag}"] = shlex.join(argv)
        self.logf = open(self.log_path, "w")  # noqa: SIM115 (held by the child process)
        self.proc = subprocess.Popen(
            argv, stdout=self.logf, stderr=subprocess.STDOUT, env=exporter_env(), cwd=REPO, process_group=0
        )
        record_pgid(self.proc.pid)
        end = time.time() + 30
        while time.time() < end:
            if self.proc.poll() is not None:
                log(f"exporter serve EXITED rc={self.proc.returncode}")
                for x in tail(self.log_path, 30):
                    print("  " + x, flush=True)
                return False
            st, _ = try_get(self.port, "/metrics", timeout=2, host=self.host)
            if st == 200:
                log("exporter serve answers /metrics")
                os.makedirs(self.snap_dir, exist_ok=True)
                self.thread = threading.Thread(target=self._loop, daemon=True)
                self.thread.start()
                return True
            time.sleep(0.5)
        log("exporter serve: no /metrics within 30 s")
        return False

    def _loop(self):
        every = float(os.environ.get("KVO_SCRAPE_EVERY", "5"))
        while not self.stop_ev.wait(every):
            self.scrape_to(os.path.join(self.snap_dir, f"{self.n:03d}_{time.time() - T0:06.1f}s.txt"))
            self.n += 1

    def scrape_to(self, path):
        st, text = try_get(self.port, "/metrics", timeout=5, host=self.host)
        if st == 200:
            with open(path, "w") as f:
                f.write(text)
        return st

    def stop(self):
        self.stop_ev.set()
        if self.thread:
            self.thread.join(timeout=10)
        if self.proc is not None:
            stop_proc(self.proc, "exporter serve", grace=10)
            self.logf.close()
            self.proc = None


# `check` exit codes: 0 effective, 1 ineffective, 2 inconclusive (all three are verdicts), 3 error
CHECK_OK = {int(x) for x in os.environ.get("KVO_CHECK_OK_RCS", "0,1,2").split(",") if x.strip()}
VERDICT = {0: "effective", 1: "ineffective", 2: "inconclusive", 3: "error"}


def check_ok(res):
    return bool(res) and res[0] in CHECK_OK


def run_check(target_url, control_url, rounds, tag, timeout):
    json_path = os.path.join(WORK, f"check_{tag}.json")
    ev_dir = os.path.join(WORK, f"evidence_{tag}")
    argv = exporter_argv(
        os.environ.get("KVO_CHECK_ARGS"),
        "check",
        target=target_url,
        control=f"--control-target {control_url}" if control_url else "",
        rounds=str(rounds),
        json=json_path,
        evidence=ev_dir,
    )
    log(f"exporter check [{tag}] (timeout {timeout:.0f}s):", shlex.join(argv))
    logp = os.path.join(WORK, f"check_{tag}.log")
    t = time.time()
    with open(logp, "w") as lf:
        p = subprocess.Popen(argv, stdout=lf, stderr=subprocess.STDOUT, env=exporter_env(), cwd=REPO, process_group=0)
        record_pgid(p.pid)
        try:
            rc = p.wait(timeout=max(timeout, 5))
        except subprocess.TimeoutExpired:
            log(f"check [{tag}] TIMEOUT after {timeout:.0f}s: SIGINT")
            kill_group(p.pid, signal.SIGINT)
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                kill_group(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
            rc = "timeout"
        finally:
            if p.poll() is None:  # interrupted ourselves (SIGTERM): take the check down too
                kill_group(p.pid, signal.SIGKILL)
    dt = round(time.time() - t, 1)
    log(f"check [{tag}] rc={rc} ({VERDICT.get(rc, 'timeout' if rc == 'timeout' else '?')}) in {dt}s; last lines:")
    for x in tail(logp, 25):
        print("  " + x, flush=True)
    SUMMARY.setdefault("checks", {})[tag] = {
        "rc": rc,
        "s": dt,
        "argv": shlex.join(argv),
        "json": os.path.exists(json_path),
        "evidence": os.path.exists(ev_dir),
    }
    return rc, json_path, ev_dir


# ------------------------------------------------------------------------------ built-in canary
RNG = random.Random(20261129)


def rand_tokens(n):
    return [RNG.randrange(1000, 150000) for _ in range(n)]


KEYS = re.compile(
    r"^(vllm:(prefix_cache_(queries|hits)|external_prefix_cache_(queries|hits)|kv_offload_"
    r"(load|store)_bytes|kv_offload_total_bytes|prompt_tokens_by_source|prompt_tokens_cached)"
    r"[a-z_]*)(\{[^}]*\})?\s+(\S+)"
)


def key_counters(text):
    vals = {}
    for line in text.splitlines():
        m = KEYS.match(line)
        if m and not m.group(1).endswith("_created"):
            lab = re.sub(r'(model_name|engine)="[^"]*",?', "", m.group(6) or "").replace(",}", "}").replace("{}", "")
            try:
                vals[m.group(1) + lab] = float(m.group(7))
            except ValueError:
                pass
    return vals


def canary(server, tag, cdir):
    """cold P, P again (GPU hit), 3 x 6000-token pressure, P after eviction, salted P; /metrics around each."""
    os.makedirs(cdir, exist_ok=True)
    steps, n = [], [0]

    def snap(label):
        n[0] += 1
        st, text = try_get(server.port, "/metrics", timeout=10)
        if st == 200:
            with open(os.path.join(cdir, f"{tag}_{n[0]:02d}_{label}.txt"), "w") as f:
                f.write(text)
        return key_counters(text) if st == 200 else {}

    def step(name, toks, salt=None, flush=True):
        b = snap(name + "_before")
        r = complete(server.port, server.served, toks, salt=salt)
        if flush:
            time.sleep(0.5)
            complete(server.port, server.served, rand_tokens(4))
            time.sleep(0.5)
        a = snap(name + "_after")
        d = {k: round(v - b.get(k, 0.0), 3) for k, v in a.items() if abs(v - b.get(k, 0.0)) > 1e-9}
        cached = ((r.get("usage") or {}).get("prompt_tokens_details") or {}).get("cached_tokens")
        steps.append(
            {
                "step": name,
                "ok": r.get("ok"),
                "ttft_ms": r.get("ttft_ms"),
                "cached_tokens": cached,
                "server_metrics": r.get("server_metrics"),
                "error": r.get("error"),
                "delta": d,
            }
        )
        short = {k: v for k, v in d.items() if "hits" in k or "bytes" in k}
        log(f"  canary {tag} {name:<12} ok={r.get('ok')} ttft={r.get('ttft_ms')}ms cached={cached} {json.dumps(short)}")

    P = rand_tokens(6000)
    step("P_cold", P)
    step("P_gpu_hit", P)
    for j in range(3):
        step(f"pressure{j}", rand_tokens(6000), flush=(j == 2))
    step("P_evicted", P)  # A: CPU-tier hit; B: recompute
    step("P_salted", P, salt=f"kvo-{RNG.random():.6f}")
    return steps


# ----------------------------------------------------------------------------------------- output
def pack(prefix, servers, exporters, checks):
    """Copy the few top-level files to OUT, everything else into OUT/<prefix>logs.tgz."""
    for tag, (rc, jp, ev) in checks.items():
        name = "check.json" if tag == "main" else f"{prefix}check_{tag}.json"
        if os.path.exists(jp):
            shutil.copy(jp, os.path.join(OUT, name))
    evs = [(tag, ev) for tag, (rc, jp, ev) in checks.items() if os.path.isdir(ev)]
    if evs:
        with tarfile.open(os.path.join(OUT, f"{prefix}evidence.tgz"), "w:gz") as tf:
            for tag, ev in evs:
                tf.add(ev, arcname=f"evidence_{tag}")
    with open(os.path.join(WORK, "summary.json"), "w") as f:
        json.dump(SUMMARY, f, indent=1, default=str)
    for s in servers:
        trimmed_copy(s.log_path, s.log_path + ".trim")
    with tarfile.open(os.path.join(OUT, f"{prefix}logs.tgz"), "w:gz") as tf:
        for root, _dirs, files in os.walk(WORK):
            for fn in sorted(files):
                p = os.path.join(root, fn)
                if p.startswith(os.path.join(WORK, "evidence_")) or (fn.startswith("check_") and fn.endswith(".json")):
                    continue
                if any(p == s.log_path for s in servers):
                    continue  # the .trim copy goes instead
                tf.add(p, arcname=os.path.relpath(p, os.path.dirname(WORK)))
    sizes = {f: os.path.getsize(os.path.join(OUT, f)) for f in sorted(os.listdir(OUT))}
    log("OUT:", json.dumps(sizes))
    if len(sizes) > 8:
        log("WARNING: more than 8 files in OUT; only 8 come back")


def final_scrapes(prefix, servers, exp, exp_name, vllm_dir=None):
    """Final exporter /metrics -> OUT/exp_name; each server's /metrics -> vllm_dir (default OUT)."""
    if exp is not None and exp.proc is not None:
        time.sleep(2.5)  # two poll intervals: the exporter has seen the last traffic
        st = exp.scrape_to(os.path.join(OUT, exp_name))
        log(f"exporter final /metrics -> {exp_name} (status {st})")
    for s in servers:
        if s.proc is not None:
            ok = s.save_metrics(os.path.join(vllm_dir or OUT, f"{prefix}vllm_{s.phase}_metrics.txt"))
            log(f"vLLM {s.tag} final /metrics saved: {ok}")


def serve_with_canary(target, control, tag, seconds):
    """`serve --canary` (pressure, control target) against the connector server for `seconds`, after the
    check: the exporter's own canary series (TTFT per path, delta TTFT, verdict) on real vLLM."""
    listen = "127.0.0.1:9401"
    argv = exporter_argv(
        os.environ.get("KVO_SERVE_CANARY_ARGS")
        or "serve --target {target} --listen {listen} --poll-interval 1 --canary "
        "--canary-allow-pressure --canary-control-target {control} --canary-interval 1s "
        "--canary-budget-tokens-per-hour 50000000 --canary-secret-file {secret}",
        "serve",
        target=target,
        control=control,
        listen=listen,
        secret=os.path.join(WORK, f"canary_secret_{tag}"),
    )
    log(f"exporter serve --canary [{tag}] for {seconds:.0f}s:", shlex.join(argv))
    SUMMARY.setdefault("exporter", {})[f"serve_canary_{tag}"] = shlex.join(argv)
    log_path = os.path.join(WORK, f"exporter_serve_canary_{tag}.log")
    with open(log_path, "w") as logf:
        proc = subprocess.Popen(
            argv, stdout=logf, stderr=subprocess.STDOUT, env=exporter_env(), cwd=REPO, process_group=0
        )
        record_pgid(proc.pid)
        time.sleep(seconds)
        st, body = try_get(9401, "/metrics", timeout=5, host="127.0.0.1")
        dest = os.path.join(OUT, f"{tag}_exporter_canary_metrics.txt")
        if st == 200:
            write_text(dest, body if isinstance(body, str) else body.decode())
        log(f"exporter serve --canary [{tag}] /metrics status {st} -> {os.path.basename(dest)}")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    for line in tail(log_path, 15):
        print("  " + line, flush=True)


def serve_check_canary(servers, tag, rounds, check_share=1.0):
    """exporter serve against `servers`, check (first = target, second = control), canary, final scrapes.
    Returns (exporter, check result)."""
    urls = [f"http://127.0.0.1:{s.port}" for s in servers]
    exp = Exporter(urls, tag)
    exp.start()
    if exp.proc is not None and exp.proc.poll() is None:
        exp.scrape_to(os.path.join(WORK, f"exporter_{tag}_before_check.txt"))
    budget = min(float(os.environ.get("KVO_CHECK_TIMEOUT", "300")), (left() - RESERVE_S - 45) * check_share)
    res = None
    if budget > 20:
        res = run_check(urls[0], urls[1] if len(urls) > 1 else None, rounds, tag, budget)
        if exp.proc is not None:
            exp.scrape_to(os.path.join(WORK, f"exporter_{tag}_after_check.txt"))
    else:
        log(f"no time left for check [{tag}] ({left():.0f}s left)")
    serve_canary_s = float(os.environ.get("KVO_SERVE_CANARY_S", "0"))
    if serve_canary_s > 0 and len(urls) > 1 and left() > RESERVE_S + serve_canary_s + 20:
        serve_with_canary(urls[0], urls[1], tag, serve_canary_s)
    if os.environ.get("KVO_CANARY", "1") == "1" and left() > RESERVE_S + 25 * len(servers):
        SUMMARY.setdefault("canary", {})[tag] = {
            s.tag: canary(s, s.tag, os.path.join(WORK, f"canary_{tag}")) for s in servers
        }
    return exp, res


# ------------------------------------------------------------------------------------ commands
def cmd_prepare():
    log("== machine")
    if not MOCK:
        print(sh("nvidia-smi -L; nvidia-smi --query-gpu=driver_version,memory.total,memory.used --format=csv,noheader"))
    print(sh("uname -r; nproc; free -g | head -2; df -h /tmp | tail -1; which xz tar curl 2>&1"))
    print(sh(f"{PY} -c 'import sys; print(sys.version)'"))
    vers = (
        "torch triton transformers numpy aiohttp prometheus-client psutil PyYAML nvidia-ml-py protobuf "
        "uvloop anyio typing_extensions attrs click h11 httpx pydantic setuptools"
    )
    code = (
        f"import importlib.metadata as m\nfor n in {vers!r}.split():\n"
        "    try: print(f'  {n}=={m.version(n)}')\n    except Exception as e: print(f'  {n}: {e!r}')\n"
    )
    print(sh(f"{PY} -c {shlex.quote(code)}", timeout=60))
    if not MOCK:
        print(
            sh(
                f"{PY} -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), "
                "torch.cuda.get_device_name(0))'",
                timeout=120,
            )
        )
    if os.path.isdir(SITE):
        import_test()
        compile_bundle()
    else:
        log("site/ not unpacked yet: import test and compileall deferred")
    exporter_preflight()
    if os.path.isdir(SITE):
        write_text(os.path.join(STORE, "prepared"), f"{time.time():.0f}\n")
    return 0


DEPS = [
    "pydantic",
    "pydantic_core",
    "fastapi",
    "starlette",
    "uvicorn",
    "openai",
    "anthropic",
    "mcp",
    "zmq",
    "msgspec",
    "xgrammar",
    "llguidance",
    "outlines_core",
    "mistral_common",
    "cbor2",
    "pybase64",
    "setproctitle",
    "ijson",
    "partial_json_parser",
    "pythonjsonlogger",
    "prometheus_fastapi_instrumentator",
    "blake3",
    "compressed_tensors",
    "depyf",
    "opentelemetry.sdk.trace",
    "model_hosting_container_standards",
    "openai_harmony",
    "jsonschema",
    "lark",
    "lmformatenforcer",
    "watchfiles",
    "httptools",
    "websockets",
    "uvloop",
    "sse_starlette",
    "multipart",
    "email_validator",
    "jiter",
    "httpx2",
    "tvm_ffi",
]


def import_test():
    code = (
        f"import importlib,sys\nbad=[]\nfor m in {DEPS!r}:\n    try: importlib.import_module(m)\n"
        "    except Exception as e: bad.append((m, repr(e)[:200]))\nprint('IMPORT_FAILURES', len(bad), bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    best = None
    for pp in (SITE, f"{SITE}:{OVER}"):
        t = time.time()
        env = dict(os.environ, PYTHONPATH=pp, HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1")
        try:
            p = subprocess.run([PY, "-c", code], capture_output=True, text=True, env=env, timeout=180, check=False)
            rc, out = p.returncode, (p.stdout + p.stderr).strip()
        except subprocess.TimeoutExpired:
            rc, out = 99, "timeout"
        m = re.search(r"IMPORT_FAILURES (\d+)", out)
        nbad = int(m.group(1)) if m else 99
        log(f"import test PYTHONPATH={pp}: rc={rc}, failures={nbad} ({time.time() - t:.1f}s)")
        if nbad:
            print(out[-2500:], flush=True)
        if best is None or nbad < best[1]:
            best = (pp, nbad)
        if rc == 0:
            break
    with open(os.path.join(STORE, "pythonpath"), "w") as f:
        f.write(best[0])
    log(f"vLLM PYTHONPATH = {best[0]} (failures {best[1]})")


def compile_bundle():
    if os.environ.get("KVO_COMPILEALL", "1") != "1" or os.path.exists(os.path.join(STORE, "compiled")):
        return
    t = time.time()
    jobs = os.environ.get("KVO_COMPILE_JOBS", "0")
    try:
        p = subprocess.run(
            [PY, "-m", "compileall", "-q", "-j", jobs, SITE],
            capture_output=True,
            text=True,
            timeout=max(30, min(240, left() - 60)),
            check=False,
        )
        rc = p.returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    # rc 1 = some file did not compile (py2-only test data etc.): harmless
    n = sum(1 for r, _d, fs in os.walk(SITE) if r.endswith("__pycache__") for _ in fs)
    log(f"compileall site/: rc={rc}, {n} .pyc files, {time.time() - t:.1f}s")
    if rc != "timeout":
        write_text(os.path.join(STORE, "compiled"), f"{time.time():.0f}\n")


MIN_VERSIONS = {
    "aiohttp": "3.9",
    "prometheus-client": "0.20",
    "psutil": "5.9",
    "nvidia-ml-py": "12.535",
    "PyYAML": "6.0",
}


def exporter_preflight():
    """Choose the exporter's PYTHONPATH: <repo>:site first, then + xdeps/ + over/ (bundle copies)."""
    code = (
        "import importlib, importlib.metadata as md, re, sys\nbad = []\n"
        "for mod in ('aiohttp', 'prometheus_client', 'psutil', 'yaml', 'pynvml'):\n"
        "    try: importlib.import_module(mod)\n"
        "    except Exception as e: bad.append(f'{mod}: {e!r}'[:200])\n"
        "def v(s): return tuple(int(x) for x in re.findall(r'\\d+', s)[:3])\n"
        f"for dist, mn in {MIN_VERSIONS!r}.items():\n"
        "    try:\n        got = md.version(dist)\n        print(f'  {dist}=={got} (min {mn})')\n"
        "        if v(got) < v(mn): bad.append(f'{dist} {got} < {mn}')\n"
        "    except Exception as e: bad.append(f'{dist}: {e!r}'[:200])\n"
        "print('EXPORTER_DEP_PROBLEMS', bad)\nsys.exit(1 if bad else 0)\n"
    )
    base = shlex.split(os.environ.get("KVO_EXPORTER") or f"{PY} -m exporter")
    chosen = None
    for pp in (f"{REPO}:{SITE}", f"{REPO}:{SITE}:{XDEPS}:{OVER}"):
        env = dict(os.environ, PYTHONPATH=pp)
        r1 = subprocess.run(
            [PY, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=120, check=False
        )
        r2 = subprocess.run(
            base + ["--help"], capture_output=True, text=True, env=env, cwd=REPO, timeout=120, check=False
        )
        log(f"exporter preflight PYTHONPATH={pp}: deps rc={r1.returncode}, `--help` rc={r2.returncode}")
        print((r1.stdout + r1.stderr).strip()[-1500:], flush=True)
        if r2.returncode != 0:
            print((r2.stdout + r2.stderr).strip()[-1500:], flush=True)
        if r1.returncode == 0 and r2.returncode == 0:
            chosen = pp
            break
    if chosen is None:
        chosen = f"{REPO}:{SITE}:{XDEPS}:{OVER}"
        log("exporter preflight FAILED with both PYTHONPATHs; using", chosen)
    with open(os.path.join(STORE, "exporter_pythonpath"), "w") as f:
        f.write(chosen)
    env = dict(os.environ, PYTHONPATH=chosen)
    for sub in ("serve", "check"):
        sb = shlex.split(os.environ.get(f"KVO_EXPORTER_{sub.upper()}") or " ".join(map(shlex.quote, base)))
        r = subprocess.run(
            sb + [sub, "--help"], capture_output=True, text=True, env=env, cwd=REPO, timeout=60, check=False
        )
        txt = (r.stdout + r.stderr).strip()
        log(f"`exporter {sub} --help` rc={r.returncode}")
        print("  " + txt[:1200].replace("\n", "\n  "), flush=True)
    log("exporter PYTHONPATH =", chosen)
    return chosen


def start_pair(model, util, prefix):
    """A then B (B only after A is healthy: vLLM's memory profiling asserts that no other process frees
    GPU memory while it profiles). Returns the list of healthy servers."""
    a = Server("A", PORT_A, model, util, f"{prefix}A")
    a.start()
    if not a.wait_healthy(timeout=min(300, left() - 120)) or not a.smoke():
        a.stop()
        return []
    b = Server("B", PORT_B, model, util, f"{prefix}B")
    b.start()
    if not b.wait_healthy(timeout=min(240, left() - 90)) or not b.smoke():
        b.stop()
        return [a]
    return [a, b]


def cmd_run06():
    os.makedirs(WORK, exist_ok=True)
    kill_stale()
    if not os.path.exists(os.path.join(STORE, "exporter_pythonpath")):
        exporter_preflight()
    machine("start")
    util = float(os.environ.get("KVO_GPU_UTIL_06", "0.4"))
    servers, exp, checks, rc = [], None, {}, 0
    try:
        servers = start_pair("0.6b", util, "")
        if not servers:
            log("ABORT: phase A server did not come up (see the log lines above; logs.tgz has the full log)")
            rc = 10
            return rc
        machine("servers_up")
        if len(servers) == 1:
            log("phase B did not come up: single-target serve/check against A only")
        rounds = int(os.environ.get("KVO_ROUNDS", "10"))
        exp, res = serve_check_canary(servers, "main", rounds)
        if res:
            checks["main"] = res
            rc = 0 if check_ok(res) else 11
        else:
            rc = 12
        final_scrapes("", servers, exp, "exporter_metrics.txt")
    finally:
        if exp:
            exp.stop()
        for s in reversed(servers):
            s.stop()
        SUMMARY["rc"] = rc
        pack("", servers, [exp], checks)
        _drop_pgids()
        log(
            "SUMMARY",
            json.dumps(
                {
                    "rc": rc,
                    "servers": {k: v.get("ready_s") for k, v in SUMMARY.get("servers", {}).items()},
                    "checks": SUMMARY.get("checks"),
                },
                default=str,
            ),
        )
    return rc


def cmd_run32():
    """OUT (at most 7 files): step log, check json(s), 32_evidence.tgz, exporter /metrics (one per serve),
    32_logs.tgz (server logs, final vLLM /metrics, scrapes, canary, summary)."""
    os.makedirs(WORK, exist_ok=True)
    kill_stale()
    if not os.path.exists(os.path.join(STORE, "exporter_pythonpath")):
        exporter_preflight()
    wait_gpu_free()
    machine("start")
    mode = os.environ.get("KVO_32B_MODE", "auto")
    pair_util = float(os.environ.get("KVO_32B_PAIR_UTIL", "0.49"))
    seq_util = float(os.environ.get("KVO_32B_SEQ_UTIL", "0.9"))
    rounds = int(os.environ.get("KVO_ROUNDS_32B", "10"))
    all_servers, exps, checks, rc = [], [], {}, 0
    try:
        up = []
        if mode in ("auto", "pair"):
            # both side by side (61 GiB of dummy weights each): A first, B once A is healthy
            up = start_pair("32b", pair_util, "32")
            all_servers += up
            if len(up) == 2:
                mode = "pair"
            elif mode == "pair":
                log(f"32B pair start failed ({len(up)} up)")
                return 10
            else:  # auto: keep A if it came up (at pair_util), else start it alone at seq_util
                log(f"32B pair start failed ({len(up)} up): sequential plan")
                mode = "seq"
        SUMMARY["mode_32b"] = mode
        log("32B mode:", mode)
        if mode == "pair":
            machine("servers_up")
            exp, res = serve_check_canary(up, "32", rounds)
            exps.append(exp)
            if res:
                checks["32"] = res
            rc = 0 if check_ok(res) else 11
            final_scrapes("32_", up, exp, "32_exporter_metrics.txt", vllm_dir=WORK)
            return rc
        a = up[0] if up else None
        if a is None:
            wait_gpu_free()
            a = Server("A", PORT_A, "32b", seq_util, "32A")
            all_servers.append(a)
            a.start()
            if not a.wait_healthy(timeout=min(300, left() - 200)) or not a.smoke():
                a.stop()
                rc = 10
                return rc
        machine("A_up")
        exp, res = serve_check_canary([a], "32A", rounds, check_share=0.4)
        exps.append(exp)
        if res:
            checks["32A"] = res
        final_scrapes("32_", [a], exp, "32_exporter_A_metrics.txt", vllm_dir=WORK)
        exp.stop()
        a.stop()
        if left() < 150:
            log("no time left for the 32B phase B")
            rc = 13
            return rc
        wait_gpu_free()
        b = Server("B", PORT_B, "32b", seq_util, "32B")
        all_servers.append(b)
        b.start()
        if not b.wait_healthy(timeout=min(240, left() - 60)) or not b.smoke():
            b.stop()
            rc = 14
            return rc
        machine("B_up")
        exp, res = serve_check_canary([b], "32B", rounds)
        exps.append(exp)
        if res:
            checks["32B"] = res
        final_scrapes("32_", [b], exp, "32_exporter_B_metrics.txt", vllm_dir=WORK)
        rc = 0 if checks and all(check_ok(r) for r in checks.values()) else 11
        return rc
    finally:
        for e in exps:
            e.stop()
        for s in reversed(all_servers):
            s.stop()
        SUMMARY["rc"] = rc
        pack("32_", all_servers, exps, checks)
        _drop_pgids()
        log(
            "SUMMARY",
            json.dumps(
                {
                    "rc": rc,
                    "mode": SUMMARY.get("mode_32b"),
                    "servers": {k: v.get("ready_s") for k, v in SUMMARY.get("servers", {}).items()},
                    "checks": SUMMARY.get("checks"),
                },
                default=str,
            ),
        )


def _drop_pgids():
    try:
        os.remove(PGIDS)  # every group this run started is stopped
    except OSError:
        pass


def main():
    if CMD == "prepare":
        return cmd_prepare()
    if CMD == "stop":
        kill_stale()
        return 0

    def on_term(signum, _frame):  # the device tool's timeout: leave through the finally blocks
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    if CMD == "run06":
        return cmd_run06()
    if CMD == "run32":
        return cmd_run32()
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
