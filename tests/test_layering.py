"""Architecture guard: pure modules import no I/O libraries, directly or through the project, and each
package keeps its I/O in the modules named for it (canary: client; simulator: server, sender)."""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

import pytest

import exporter.sim

ROOT = Path(__file__).resolve().parents[1]
IO = ("aiohttp", "psutil", "pynvml", "socket", "http.client", "http.server", "requests", "urllib.request")
CORE_PURE = [
    "catalogue",
    "enums",
    "exposition",
    "model",
    "normalise",
    "samples",
    "derive",
    "reasons",
    "render",
    "collector",
    "config",
    "limits",
    "redact",
    "selfmon",
    "procmem",
    "configvalues",
    "saferegex",
    "yamlsafe",
    "guards",
    "safewrite",
]
CANARY_PURE = [
    *("types", "plan", "classify", "stats", "budget", "config", "protocol", "expose", "report", "png", "engine"),
    *("errors", "records", "state", "scrapes", "preflight", "prepared", "steps", "cycle", "pressure", "wait"),
    *("schedule", "checkrun", "checkreport", "evidence"),
]
SIM_IO = {"server", "sender"}
SIM_PURE = sorted(m.name for m in pkgutil.iter_modules(exporter.sim.__path__) if m.name not in SIM_IO)
PURE = (
    [f"exporter.{m}" for m in CORE_PURE]
    + [f"exporter.canary.{m}" for m in CANARY_PURE]
    + [f"exporter.sim.{m}" for m in SIM_PURE]
)


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def _path(module: str) -> Path | None:
    for p in (ROOT / (module.replace(".", "/") + ".py"), ROOT / module.replace(".", "/") / "__init__.py"):
        if p.exists():
            return p
    return None


def _closure(module: str, seen: set[str]) -> set[str]:
    """Modules imported by `module` and, transitively, by every project module it imports."""
    path = _path(module)
    if module in seen or path is None:
        return set()
    seen.add(module)
    found: set[str] = set()
    for imp in _imports(path):
        found.add(imp)
        if imp.startswith("exporter."):
            found |= _closure(imp, seen)
    return found


@pytest.mark.parametrize("module", PURE)
def test_pure_module_has_no_io_imports(module: str) -> None:
    bad = {m for m in _closure(module, set()) if m == "http" or m.startswith(IO)}
    assert not bad, f"{module} pulls in {bad}"


@pytest.mark.parametrize("package,allowed", [("canary", {"client"}), ("sim", SIM_IO)])
def test_only_the_named_modules_import_aiohttp(package: str, allowed: set[str]) -> None:
    users = {
        p.stem
        for p in (ROOT / "exporter" / package).glob("*.py")
        if "aiohttp" in {i.split(".")[0] for i in _imports(p)}
    }
    assert users <= allowed, users - allowed
    # Each named module is seen importing aiohttp: a scan that found no imports at all would pass the
    # line above vacuously.
    assert users == allowed, allowed - users
