"""The per-backend reconstructed fixtures are well-formed, cited, regenerable and self-consistent.

Why: a resolver for SimpleCPU, tiering, MultiConnector, LMCache and KVBM is written against these files
before any live capture exists, so a fixture that lies (uncited family, hand edit, an expected state that
contradicts its own numbers) would make that resolver wrong in a way no other test sees.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.prom import families

ROOT = Path(__file__).resolve().parents[1]
RECON = ROOT / "tests" / "fixtures" / "reconstructed"
BACKEND_DIRS = sorted(p for p in RECON.iterdir() if (p / "expected.json").is_file())
PROM_FILES = sorted(f for d in BACKEND_DIRS for f in d.glob("*.prom"))


def _families(text: str) -> list[str]:
    return [f.name for f in families(text)]


def _cited(text: str) -> set[str]:
    names = set()
    for line in text.splitlines():
        if line.startswith("# cite: "):
            names.add(line.removeprefix("# cite: ").split(" <- ", 1)[0])
    return names


def test_there_are_backend_fixtures() -> None:
    assert len(BACKEND_DIRS) >= 8 and len(PROM_FILES) >= 30


@pytest.mark.parametrize("path", PROM_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_parses_and_every_family_is_cited(path: Path) -> None:
    text = path.read_text()
    assert text.startswith("# RECONSTRUCTED, NOT CAPTURED."), "header must say the body was not captured"
    cited = _cited(text)
    for name in _families(text):
        base = name.removesuffix("_created")
        ok = {name, name + "_total", base, base + "_total"} & cited
        assert ok, f"{path.name}: family {name} has no '# cite:' line"
    for name in cited:
        assert f"# TYPE {name} " in text, f"{path.name}: cites {name}, which the body does not declare"


@pytest.mark.parametrize("backend", BACKEND_DIRS, ids=lambda p: p.name)
def test_expected_states_agree_with_their_own_numbers(backend: Path) -> None:
    exp = json.loads((backend / "expected.json").read_text())
    for chain in exp["chains"]:
        for ref in (chain["from"], chain["to"]):
            assert (backend / ref).is_file()
        for engine in chain["engines"].values():
            values = engine["values"]
            if not exp["fits_schema"]:
                assert engine["state"] == "not_configured"
                continue
            sig = exp["signals"]
            loaded = [v for v, s in zip(values["loaded"], sig["loaded"]) if not s.get("breakdown")]
            stored = sum(v or 0 for v in values["stored"])
            assert (engine["state"] == "hit") == any((v or 0) > 0 for v in loaded), chain["name"]
            if engine["state"] in ("storing", "store_without_load"):
                assert stored > 0 and not any((v or 0) > 0 for v in values["loaded"]), chain["name"]
            if engine["state"] == "store_without_load":
                assert sum(v or 0 for v in values["lookups"]) > 0, chain["name"]


def test_generator_reproduces_the_committed_files() -> None:
    res = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "fixtures" / "generate.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
