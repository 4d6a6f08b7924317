"""One module map (docs/design.md), held against the tree: every module of `kvoffload_exporter/` has a row, no row
names a file that is gone, and each row's layer is the one tests/test_layering.py gives the module. Code
and docs cite no issues, briefs or changes: they say why in their own words."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.support.layers import LAYER_NAMES, layer_of

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
ROW = re.compile(r"^\| `(kvoffload_exporter/[^`]+)` \| .+ \| (\w+) \|$")


def _expand(path: str) -> list[str]:
    """`kvoffload_exporter/a/{b,c}.py` → [`kvoffload_exporter/a/b.py`, `kvoffload_exporter/a/c.py`]."""
    m = re.fullmatch(r"(.*)\{([^}]+)\}(.*)", path)
    return [f"{m.group(1)}{part}{m.group(3)}" for part in m.group(2).split(",")] if m else [path]


def rows(text: str) -> dict[str, list[str]]:
    """Module path → the layers its rows give it (a path listed twice has two)."""
    section = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    out: dict[str, list[str]] = {}
    for line in section.splitlines():
        if m := ROW.match(line):
            for path in _expand(m.group(1)):
                out.setdefault(path, []).append(m.group(2))
    return out


def _modules() -> set[str]:
    return {str(p.relative_to(ROOT)) for p in (ROOT / "kvoffload_exporter").rglob("*.py") if p.name != "__init__.py"}


def _dotted(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def test_every_module_has_one_row_and_no_row_is_stale() -> None:
    listed = rows(DESIGN.read_text())
    assert not sorted(_modules() - listed.keys()), "modules missing from docs/design.md's module map"
    assert not sorted(listed.keys() - _modules()), "rows for modules that do not exist"
    assert not {p: n for p, n in listed.items() if len(n) > 1}, "modules listed more than once"


def test_every_row_gives_the_layer_the_layering_test_uses() -> None:
    wrong = {
        p: (n[0], LAYER_NAMES[layer_of(_dotted(p))])
        for p, n in rows(DESIGN.read_text()).items()
        if n[0] != LAYER_NAMES[layer_of(_dotted(p))]
    }
    assert not wrong, f"row layer != layer in tests/test_layering.py: {wrong}"


def test_the_map_check_can_fail() -> None:
    text = DESIGN.read_text()
    assert "kvoffload_exporter/server/app.py" in rows(text)
    trimmed = "\n".join(ln for ln in text.splitlines() if not ln.startswith("| `kvoffload_exporter/server/app.py`"))
    assert "kvoffload_exporter/server/app.py" not in rows(trimmed)
    assert rows("## Module map\n| `kvoffload_exporter/{a,b}.py` | x | data |\n") == {
        "kvoffload_exporter/a.py": ["data"],
        "kvoffload_exporter/b.py": ["data"],
    }


CITATIONS = re.compile(r"(?i)\bissues? #?\d+|\bthe brief\b|\bas the brief\b|\(this change\)|\bthis change\b")


def test_code_and_docs_cite_no_issues_briefs_or_changes() -> None:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    texts = [f for f in files if f.endswith((".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".json", ".libsonnet"))]
    found = []
    for name in texts:
        if name == "tests/test_module_map.py":
            continue
        for i, line in enumerate((ROOT / name).read_text(errors="replace").splitlines(), 1):
            if CITATIONS.search(line):
                found.append(f"{name}:{i}: {line.strip()[:100]}")
    assert not found, found
    # built here so this file does not cite anything itself
    cited, change = "as " + "issue" + " 16 said", "After (" + "this change):"
    assert CITATIONS.search(cited) and CITATIONS.search(change)
    assert not CITATIONS.search("vllm-project/vllm#47890")
