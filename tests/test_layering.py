"""Pure modules import no I/O libraries (aiohttp, psutil, pynvml), directly or through the project."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "exporter"
PURE = ["catalogue", "exposition", "model", "normalise", "derive", "render", "collector", "config"]
FORBIDDEN = {"aiohttp", "psutil", "pynvml"}


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def _closure(module: str, seen: set[str]) -> set[str]:
    path = ROOT / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = ROOT / module.replace(".", "/") / "__init__.py"
    if module in seen or not path.exists():
        return set()
    seen.add(module)
    found = set()
    for imp in _imports(path):
        found.add(imp.split(".")[0])
        if imp.startswith("exporter."):
            found |= _closure(imp[len("exporter."):], seen)
    return found


@pytest.mark.parametrize("module", PURE)
def test_pure_module_has_no_io_imports(module: str) -> None:
    bad = _closure(module, set()) & FORBIDDEN
    assert not bad, f"exporter.{module} pulls in {bad}"
