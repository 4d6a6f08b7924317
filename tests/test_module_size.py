"""No module of the product over 400 lines: a module that size holds more than one job."""

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
