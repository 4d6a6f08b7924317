"""The exporter against real vLLM: `inspect` on live /metrics dumps, and `serve` polling both servers.

Every expectation is a counter (exact and deterministic on these servers), never a latency. A 2000-token
prompt is 15 full KV blocks of 128 tokens = 1,966,080 B in the offload tier (the 16th block is partial).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from . import client
from .vllm_server import BLOCK_TOKENS, KV_BYTES_PER_TOKEN, VllmServer, free_port

PROMPT_TOKENS = 2000
HIT_TOKENS = PROMPT_TOKENS // BLOCK_TOKENS * BLOCK_TOKENS  # 1920
PROMPT_BYTES = HIT_TOKENS * KV_BYTES_PER_TOKEN  # 1,966,080
FILLERS = 5  # 5 more 16-block prompts overflow the offload server's 64-block engine cache
ROOT = Path(__file__).resolve().parents[2]

ENGINE_LOAD = "vllm:kv_offload_load_bytes_total"
ENGINE_STORE = "vllm:kv_offload_store_bytes_total"

pytestmark = pytest.mark.e2e


def run_exporter(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    # sys.executable is the project venv's python (the one running pytest), where `exporter` is installed.
    return subprocess.run(
        [sys.executable, "-m", "kvoffload_exporter", *args],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def inspect_json(before: Path, after: Path) -> dict:
    done = run_exporter("inspect", "--json", str(before), str(after))
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["mode"] == "interval"
    [engine] = doc["engines"]  # one engine, model "tiny"
    assert engine["model_name"] == client.MODEL
    return engine


def delta(before: str, after: str, name: str) -> float:
    return client.total(after, name) - client.total(before, name)


class Dumps:
    """Numbered /metrics dumps of one server, written to files for `inspect`."""

    def __init__(self, server: VllmServer, folder: Path):
        self.server, self.folder = server, folder
        self.texts: list[str] = []
        self.paths: list[Path] = []

    def take(self) -> int:
        client.settle(self.server.url)  # stores surface with the next engine step
        text = client.metrics(self.server.url)
        path = self.folder / f"{self.server.name}_{len(self.texts)}.prom"
        path.write_text(text)
        self.texts.append(text)
        self.paths.append(path)
        return len(self.texts) - 1


def test_inspect_offload_sequence(vllm_offload: VllmServer, tmp_path: Path) -> None:
    """cold → device hit → displaced by fillers → revisit loaded from the offload tier."""
    url = vllm_offload.url
    rng = random.Random("test_inspect_offload_sequence")
    prompt = client.prompt_ids(PROMPT_TOKENS, rng)
    dumps = Dumps(vllm_offload, tmp_path)

    d0 = dumps.take()
    assert client.complete(url, prompt).cached_tokens == 0
    cold = dumps.take()
    assert client.complete(url, prompt).cached_tokens == HIT_TOKENS  # from the engine's own cache
    hit = dumps.take()
    for _ in range(FILLERS):
        client.complete(url, client.prompt_ids(PROMPT_TOKENS, rng))
    displaced = dumps.take()
    assert client.complete(url, prompt).cached_tokens == HIT_TOKENS  # loaded back from the offload tier
    revisit = dumps.take()

    # (start, end, state, load bytes, store bytes) — the byte counts measured in real-runs.md §2.
    steps = [
        (d0, cold, "storing", 0, PROMPT_BYTES),
        (cold, hit, "idle", 0, 0),
        # stores while GPU prefix hits show reuse; from a tier that held nothing before d0 (a fresh server)
        # that is the tier filling up, `storing` (the warm-up rule: derive's stored_before)
        (d0, hit, "store_without_load" if client.total(dumps.texts[d0], ENGINE_STORE) else "storing", 0, PROMPT_BYTES),
        (hit, displaced, "storing", 0, FILLERS * PROMPT_BYTES),
        (displaced, revisit, "hit", PROMPT_BYTES, 0),
        (d0, revisit, "hit", PROMPT_BYTES, (1 + FILLERS) * PROMPT_BYTES),
    ]
    for start, end, state, load, store in steps:
        before, after = dumps.texts[start], dumps.texts[end]
        got = inspect_json(dumps.paths[start], dumps.paths[end])
        where = f"interval {start}->{end}"
        # The engine's own counter deltas, and the exact block arithmetic.
        assert (delta(before, after, ENGINE_LOAD), delta(before, after, ENGINE_STORE)) == (load, store), where
        assert (got["offload_load_bytes"], got["offload_store_bytes"]) == (load, store), where
        assert got["state"] == state, where

    last = inspect_json(dumps.paths[displaced], dumps.paths[revisit])
    assert last["external_prefix_hits"] == HIT_TOKENS
    assert last["prompt_tokens_by_source"].get("external_kv_transfer") == HIT_TOKENS
    assert last["gpu_prefix_hits"] == 0
    assert inspect_json(dumps.paths[cold], dumps.paths[hit])["gpu_prefix_hits"] == HIT_TOKENS
    assert last["cache_config"]["block_size"] == str(BLOCK_TOKENS)


def test_inspect_plain_not_configured(vllm_plain: VllmServer, tmp_path: Path) -> None:
    url = vllm_plain.url
    prompt = client.prompt_ids(PROMPT_TOKENS, random.Random("test_inspect_plain_not_configured"))
    dumps = Dumps(vllm_plain, tmp_path)
    d0 = dumps.take()
    client.complete(url, prompt)
    client.complete(url, prompt)
    d1 = dumps.take()
    got = inspect_json(dumps.paths[d0], dumps.paths[d1])
    assert got["state"] == "not_configured"
    assert got["offload_load_bytes"] is None and got["offload_store_bytes"] is None
    assert (
        got["gpu_prefix_hits"] == HIT_TOKENS == delta(dumps.texts[d0], dumps.texts[d1], "vllm:prefix_cache_hits_total")
    )


@pytest.fixture
def exporter_serve(vllm_plain: VllmServer, vllm_offload: VllmServer, tmp_path: Path):
    """`kvoffload-exporter serve` polling both servers every 0.5 s; yields its base URL."""
    port = free_port()
    log = tmp_path / "exporter.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kvoffload_exporter",
                "serve",
                "--target",
                vllm_plain.url,
                "--target",
                vllm_offload.url,
                "--web.listen-address",
                f"127.0.0.1:{port}",
                "--poll.interval",
                "0.5",
            ],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield f"http://127.0.0.1:{port}", proc, log
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def wait_for(predicate, what: str, proc: subprocess.Popen, log: Path, timeout: float = 60):
    """Poll until predicate() returns a truthy value. A deadline only against hangs: nothing is timed."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"exporter exited ({proc.returncode}):\n{log.read_text()[-3000:]}"
        try:
            last = predicate()
            if last:
                return last
        except OSError as e:  # exporter not listening yet
            last = e
        time.sleep(0.25)
    raise AssertionError(f"never saw {what}; last: {last!r}\nexporter log:\n{log.read_text()[-3000:]}")


def test_serve_polls_both_servers(exporter_serve, vllm_plain: VllmServer, vllm_offload: VllmServer) -> None:
    base, proc, log = exporter_serve
    plain, offload = (s.url.removeprefix("http://") for s in (vllm_plain, vllm_offload))  # target labels

    def both_up() -> str | None:
        text = client.metrics(base)
        ok = all(client.total(text, "kvoffload_up", target=t) == 1 for t in (plain, offload))
        # A state needs two polls of a target (one sample claims none): wait until each has its state set.
        stated = all(client.total(text, "kvoffload_state", target=t) == 1 for t in (plain, offload))
        return text if ok and stated else None

    text = wait_for(both_up, "kvoffload_up 1 for both targets", proc, log)
    assert client.total(text, "kvoffload_state", target=plain, state="not_configured") == 1
    assert client.total(text, "kvoffload_state", target=offload, state="not_configured") == 0
    assert "kvoffload_store_bytes_total" not in "".join(
        line for line in text.splitlines() if f'target="{plain}"' in line
    )
    for t in (plain, offload):
        assert client.total(text, "kvoffload_target_info", target=t, vllm_version="0.32.0") == 1

    # Move the offload counters, then wait until the exporter has polled the settled engine.
    prompt = client.prompt_ids(PROMPT_TOKENS, random.Random("test_serve_polls_both_servers"))
    client.complete(vllm_offload.url, prompt)
    client.settle(vllm_offload.url)
    engine = client.metrics(vllm_offload.url)
    want = client.total(engine, ENGINE_STORE)
    assert want >= PROMPT_BYTES

    def caught_up() -> str | None:
        text = client.metrics(base)
        got = client.total(text, "kvoffload_store_bytes_total", target=offload)
        return text if got == want else None

    text = wait_for(caught_up, f"kvoffload_store_bytes_total == {want:.0f}", proc, log)
    assert client.total(text, "kvoffload_load_bytes_total", target=offload) == client.total(engine, ENGINE_LOAD)
    # Only stores since the exporter started, no reuse: the window's evidence is "storing".
    assert client.total(text, "kvoffload_state", target=offload, state="storing") == 1
    assert client.total(text, "kvoffload_state", target=plain, state="not_configured") == 1
