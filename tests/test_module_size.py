"""No module of the product over 400 lines, no function over 120: each holds one job, read in one view."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 400
MODULES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "kvoffload_exporter").rglob("*.py"))


def test_the_walk_sees_the_package() -> None:
    assert "kvoffload_exporter/cli.py" in MODULES and "kvoffload_exporter/sim/profiles.py" in MODULES


@pytest.mark.parametrize("module", MODULES)
def test_module_is_at_most_400_lines(module: str) -> None:
    lines = (ROOT / module).read_text().count("\n")
    assert lines <= LIMIT, f"{module} has {lines} lines: split it into cohesive modules (docs/design.md)"


FUNCTION_LIMIT = 120


@pytest.mark.parametrize("module", MODULES)
def test_no_function_is_over_120_lines(module: str) -> None:
    """A function a reader holds in one view: a dashboard or a rule group is a list of small named builders,
    one per row or alert group, not one long body."""
    import ast

    tree = ast.parse((ROOT / module).read_text())
    long = [
        f"{n.name} ({n.end_lineno - n.lineno + 1} lines)"
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.end_lineno - n.lineno + 1 > FUNCTION_LIMIT
    ]
    assert not long, f"{module}: {', '.join(long)} over {FUNCTION_LIMIT} lines: split into named builders"
