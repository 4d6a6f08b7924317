"""vLLM's families read under every spelling a pipeline gives them, once per body.

Why: OpenTelemetry and managed-Prometheus pipelines deliver `vllm_<name>`, Ray Serve LLM `ray_vllm_<name>`
(with `ReplicaId` / `WorkerId`); a collector that re-exports beside the original sends two spellings of
each family in one body, and adding both counted every stored and loaded byte twice.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from kvoffload_exporter.cli import main
from kvoffload_exporter.ingest.linecache import LineCache
from kvoffload_exporter.ingest.normalise import normalise
from kvoffload_exporter.ingest.spellread import spellings_in

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "tests" / "fixtures" / "spellings"
BASE = ROOT / "tests" / "fixtures" / "reconstructed" / "mooncake-store-0.33"
VARIANTS = ("otel", "ray", "both-otel", "both-ray")
REPLICA = "SERVE_REPLICA::llm#Qwen--Qwen3-0_6B#a1b2c3"


def _make() -> Any:
    spec = importlib.util.spec_from_file_location("spellings_make", HERE / "make.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _inspect(capsys: pytest.CaptureFixture[str], d: Path) -> dict[str, Any]:
    assert main(["inspect", str(d / "before.prom"), str(d / "after-hit.prom"), "--json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def test_fixtures_are_regenerated_by_their_script() -> None:
    make = _make()
    assert make.REPLICA == REPLICA
    stale = [p.name for p, text in make.render().items() if not p.is_file() or p.read_text() != text]
    assert stale == [], "run python tests/fixtures/spellings/make.py"


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_spelling_reads_as_vllms_own(variant: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The whole `inspect --json` document of the renamed chain is the original's (Ray: the replica is
    part of the engine)."""
    want = _inspect(capsys, BASE)
    got = _inspect(capsys, HERE / variant)
    if variant == "ray":
        for e in got["engines"]:
            assert e["engine"].startswith(REPLICA + "/")
            e["engine"] = e["engine"].removeprefix(REPLICA + "/")
    assert got == want


@pytest.mark.parametrize("variant", ["both-otel", "both-ray"])
def test_two_spellings_in_one_body_are_never_double_counted(variant: str, capsys: pytest.CaptureFixture[str]) -> None:
    def moved(doc: dict[str, Any]) -> dict[str, float]:
        (engine,) = doc["engines"]
        out = {e["signal"]: e["delta"] for e in engine["evidence"] if e["signal"] in ("stored", "loaded", "lookups")}
        return {**out, "prompt_tokens": engine["prompt_tokens"], "ttft_count": engine["ttft_count"]}

    want, got = moved(_inspect(capsys, BASE)), moved(_inspect(capsys, HERE / variant))
    assert want["stored"] > 0 and want["loaded"] > 0
    assert got == want


def test_the_line_cache_never_carries_one_spellings_reading_into_another() -> None:
    """One target's cache across bodies that change spelling (and a planned re-read of each) gives the
    snapshot a fresh read gives: a line skipped as another spelling's is not skipped for good."""
    bodies = [
        (BASE / "after-hit.prom").read_text(),
        (HERE / "otel" / "after-hit.prom").read_text(),
        (HERE / "otel" / "after-hit.prom").read_text(),
        (HERE / "otel" / "after-hit.prom").read_text(),
        (HERE / "both-otel" / "after-hit.prom").read_text(),
        (BASE / "after-hit.prom").read_text(),
        (BASE / "after-hit.prom").read_text(),
        (HERE / "both-ray" / "after-hit.prom").read_text(),
        (HERE / "otel" / "after-hit.prom").read_text(),
    ]
    cache = LineCache()
    for i, body in enumerate(bodies):
        assert normalise(body, cache=cache) == normalise(body), i


def test_spellings_are_told_by_sample_lines_only() -> None:
    vllm = (BASE / "after-hit.prom").read_text()
    assert spellings_in(vllm) == ("vllm:",)
    assert spellings_in((HERE / "both-ray" / "after-hit.prom").read_text()) == ("vllm:", "ray_vllm_")
    # prometheus_client's escaping renames the samples and keeps `vllm:` in HELP/TYPE
    escaped = "".join(
        line if line.startswith("#") else line.replace("vllm:", "vllm_", 1) for line in vllm.splitlines(True)
    )
    assert spellings_in(escaped) == ("vllm_",)
    assert normalise(escaped) == normalise(vllm)
    # llm-d's fs backend registers `vllm_llmd_fs_*` itself: no sign of an escaped body
    llmd = (ROOT / "tests" / "fixtures" / "reconstructed" / "multiconnector-llmd-0.32" / "after-hit.prom").read_text()
    assert "\nvllm_llmd_fs_metadata_cache_lookup_blocks_total{" in llmd
    assert spellings_in(llmd) == ("vllm:",)


def test_each_ray_replica_in_one_body_is_its_own_engine() -> None:
    """A Ray node's body holds every replica on it, each with `engine="0"`: the replica is part of the engine,
    so two replicas are two engines with their own numbers, not one engine with the sum."""
    one = (HERE / "ray" / "after-hit.prom").read_text()
    other = "".join(
        line for line in one.replace(REPLICA, "SERVE_REPLICA::llm#other").splitlines(True) if not line.startswith("#")
    )
    snap = normalise(one + other)
    assert sorted(e.engine for e in snap.engines) == sorted([f"{REPLICA}/0", "SERVE_REPLICA::llm#other/0"])
    single = normalise(one).engines[0]
    for e in snap.engines:
        assert e.counters == single.counters and e.evidence == single.evidence
