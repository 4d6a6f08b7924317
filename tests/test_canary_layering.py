"""Only exporter/canary/client.py may import aiohttp; the pure canary modules import no I/O at all."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CANARY = Path(__file__).resolve().parents[1] / "exporter" / "canary"
PURE = ["plan", "classify", "stats", "budget", "config", "protocol", "expose", "report", "png"]
IO = {"aiohttp", "psutil", "pynvml", "socket", "http", "requests"}


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def _closure(module: str, seen: set[str]) -> set[str]:
    root = CANARY.parents[1]
    path = root / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = root / module.replace(".", "/") / "__init__.py"
    if module in seen or not path.exists():
        return set()
    seen.add(module)
    found: set[str] = set()
    for imp in _imports(path):
        found.add(imp.split(".")[0])
        if imp.startswith("exporter."):
            found |= _closure(imp, seen)
    return found


@pytest.mark.parametrize("module", PURE)
def test_pure(module: str) -> None:
    bad = _closure(f"exporter.canary.{module}", set()) & IO
    assert not bad, f"exporter.canary.{module} pulls in {bad}"


def test_engine_leaves_aiohttp_to_the_client() -> None:
    assert "aiohttp" not in _closure("exporter.canary.engine", set())
    users = sorted(p.stem for p in CANARY.glob("*.py") if "aiohttp" in {i.split(".")[0] for i in _imports(p)})
    assert users == ["client"]
