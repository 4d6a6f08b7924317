"""Architecture guard: pure modules import no I/O libraries, directly or through the project; each
package keeps its I/O in the modules named for it (canary: client; simulator: server, sender); the import
graph of `exporter` has no loops and no import from a lower layer (tests/support/layers.py) to a higher one, counting every
import statement wherever it stands (inside functions and `if TYPE_CHECKING:` too)."""

from __future__ import annotations

import ast
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import kvoffload_exporter.sim
from tests.support.layers import LAYERS, layer_of

ROOT = Path(__file__).resolve().parents[1]
IO = ("aiohttp", "psutil", "pynvml", "socket", "http.client", "http.server", "requests", "urllib.request")
CORE_PURE = [
    *("catalogue", "enums", "redact", "saferegex", "safewrite"),
    *("config.settings", "config.limits", "config.values", "config.yamlsafe"),
    *("ingest.exposition", "ingest.snapshot", "ingest.normalise", "ingest.routes", "ingest.interning"),
    *("ingest.lineplan", "ingest.histplan", "ingest.samples"),
    *("derive.window", "derive.reasons", "derive.procmem"),
    *("expose.mergeplan", "expose.gzipparts", "expose.render", "expose.collector", "expose.selfmon"),
    "server.guards",
]
CANARY_PURE = [
    *("types", "plan", "classify", "stats", "budget", "config", "protocol", "expose", "report", "png", "engine"),
    *("errors", "records", "state", "scrapes", "preflight", "prepared", "steps", "cycle", "pressure", "wait"),
    *("schedule", "checkrun", "checkreport", "evidence"),
]
SIM_IO = {"server", "sender"}
SIM_PURE = sorted(m.name for m in pkgutil.iter_modules(kvoffload_exporter.sim.__path__) if m.name not in SIM_IO)
PURE = (
    [f"kvoffload_exporter.{m}" for m in CORE_PURE]
    + [f"kvoffload_exporter.canary.{m}" for m in CANARY_PURE]
    + [f"kvoffload_exporter.sim.{m}" for m in SIM_PURE]
)


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            # `from package import module` imports the module too
            out |= {f"{node.module}.{a.name}" for a in node.names if _path(f"{node.module}.{a.name}")}
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
        if imp.startswith("kvoffload_exporter."):
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
        for p in (ROOT / "kvoffload_exporter" / package).rglob("*.py")
        if "aiohttp" in {i.split(".")[0] for i in _imports(p)}
    }
    assert users <= allowed, users - allowed
    # Each named module is seen importing aiohttp: a scan that found no imports at all would pass the
    # line above vacuously.
    assert users == allowed, allowed - users


# --- the import graph: no loops, no import from a lower layer to a higher one ---------------------------

KNOWN_LOOPS: list[set[str]] = []

KNOWN_CLIMBS: list[tuple[str, str]] = []


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted((ROOT / "kvoffload_exporter").rglob("*.py")):
        parts = p.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


MODULES = _modules()


def _edges(module: str) -> set[str]:
    """Project modules `module` imports anywhere in its body (function-local and TYPE_CHECKING too)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in MODULES}
        elif isinstance(node, ast.ImportFrom) and node.module in MODULES:
            subs = {f"{node.module}.{a.name}" for a in node.names} & MODULES.keys()
            out |= subs or {node.module}
            if len(subs) < len(node.names):  # names defined by the module itself
                out.add(node.module)
    out.discard(module)
    return out


GRAPH = {m: _edges(m) for m in MODULES}


def _loops(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[set[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = set()
                while True:
                    m = stack.pop()
                    on.discard(m)
                    comp.add(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    out.append(comp)
    return out


def test_every_module_has_alayer_of() -> None:
    missing = [m for m in MODULES if not any(m == p or m.startswith(p + ".") for layer in LAYERS for p in layer)]
    assert not missing, f"add these to a layer in LAYERS (and to docs/design.md): {missing}"


def test_no_import_loops() -> None:
    loops = [sorted(c) for c in _loops(GRAPH) if c not in KNOWN_LOOPS]
    assert not loops, f"import loops: {loops}"


def _climbs(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((m, i) for m, imports in graph.items() for i in imports if layer_of(i) > layer_of(m))


def test_no_import_climbs_to_a_higherlayer_of() -> None:
    up = [c for c in _climbs(GRAPH) if c not in KNOWN_CLIMBS]
    assert not up, f"imports from a lower layer to a higher one: {up}"


def test_the_core_never_imports_the_canary() -> None:
    core = [m for m in MODULES if layer_of(m) < layer_of("kvoffload_exporter.canary")]
    found = sorted((m, i) for m in core for i in GRAPH[m] if i.startswith("kvoffload_exporter.canary"))
    assert core and not found, found


def test_the_loop_and_climb_checks_can_fail() -> None:
    """An import back (payback -> collector) is a loop; config -> canary.config climbs a layer; an import
    inside a function is an edge like any other (the scheduler imports sources.gpu only where it starts NVML)."""
    graph = {
        **GRAPH,
        "kvoffload_exporter.derive.payback": GRAPH["kvoffload_exporter.derive.payback"]
        | {"kvoffload_exporter.expose.collector"},
    }
    assert any(
        {"kvoffload_exporter.derive.payback", "kvoffload_exporter.expose.collector"} <= loop for loop in _loops(graph)
    )
    graph = {
        **GRAPH,
        "kvoffload_exporter.config.settings": GRAPH["kvoffload_exporter.config.settings"]
        | {"kvoffload_exporter.canary.config"},
    }
    assert ("kvoffload_exporter.config.settings", "kvoffload_exporter.canary.config") in _climbs(graph)
    assert "kvoffload_exporter.sources.gpu" in GRAPH["kvoffload_exporter.server.scheduler"]


def test_the_pure_check_follows_imports_through_the_project() -> None:
    """The closure walks project imports (both spellings), so an I/O import two modules down is seen."""
    collector = _closure("kvoffload_exporter.expose.collector", set())
    assert "kvoffload_exporter.derive.window" in collector  # imported by the collector
    assert "kvoffload_exporter.ingest.backends.schema" in collector  # imported by what it imports
    assert "aiohttp" in _closure("kvoffload_exporter.server.probe", set())  # through server.exporter and its scheduler


def test_the_package_root_keeps_at_most_twelve_modules() -> None:
    """A module that outgrows its size becomes a package, not a new sibling at the root."""
    root = sorted(p.name for p in (ROOT / "kvoffload_exporter").glob("*.py") if p.stem not in ("__init__", "__main__"))
    assert len(root) <= 12, root


def test_a_missing_test_dependency_fails_collection_under_ci() -> None:
    """tests/conftest.py: with CI set, `pytest.importorskip` imports instead of skipping."""
    from conftest import strict_importorskip

    with pytest.raises(ModuleNotFoundError):
        strict_importorskip("no_such_module_kvoffload")
    assert strict_importorskip("json").dumps([]) == "[]"


@pytest.mark.parametrize(("ci", "outcome"), [("true", "1 error"), ("", "1 skipped")])
def test_a_module_level_importorskip_is_a_collection_error_only_under_ci(tmp_path: Path, ci: str, outcome: str) -> None:
    """The hook in tests/conftest.py runs before collection: a test module whose dependency is missing errors
    under CI and is skipped (with its reason) elsewhere."""
    (tmp_path / "test_probe.py").write_text(
        'import pytest\n\npytest.importorskip("no_such_module_kvoffload")\n\n\ndef test_x():\n    pass\n'
    )
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"PYTHONPATH": str(ROOT / "tests")}
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest"]
    run = subprocess.run(
        [*argv, "--rootdir", str(tmp_path), str(tmp_path / "test_probe.py")],
        cwd=tmp_path,
        env=env | ({"CI": ci} if ci else {}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert outcome in run.stdout, run.stdout + run.stderr


PRIVATE_ALLOWED = {
    # RE2 semantics in linear time: google-re2 has no musllinux (Alpine) or CPython 3.13 wheel, so the pattern is
    # parsed with Python's own parser (same syntax and errors as `re`) and run on a Pike VM; the parser's
    # opcodes live in these modules. docs/design.md, "Private APIs".
    ("kvoffload_exporter.saferegex", "re._constants"),
    ("kvoffload_exporter.saferegex", "re._parser"),
}


def test_no_private_module_of_a_dependency_is_imported() -> None:
    """A dependency's `_private` module can change in any release: none is imported but the listed ones."""
    found = set()
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module",
                "__import__",
            ):  # importlib.import_module("re._parser") is an import too
                names = [a.value for a in node.args[:1] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            found |= {
                (module, n)
                for n in names
                if not n.startswith("kvoffload_exporter") and any(p.startswith("_") for p in n.split(".")[1:])
            }
    assert found == PRIVATE_ALLOWED, sorted(found ^ PRIVATE_ALLOWED)
