"""Shared test helpers: fixture paths, the one `free_port` fixture; readers live in tests/support/."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.net import free_port as _pick_port
from support.prom import offload_bytes_oracle

FIXTURES = Path(__file__).parent / "fixtures"


def strict_importorskip(modname: str, minversion: str | None = None, reason: str | None = None) -> Any:
    """`pytest.importorskip` under CI: the module is imported, and a missing one fails the collection. CI
    installs every test dependency, so a skip there would hide a broken install behind a green run; a
    developer's machine without an extra still skips, with the reason."""
    return importlib.import_module(modname)


def pytest_configure(config: pytest.Config) -> None:
    """Under CI (`CI=true` or `1`), before any test module is collected: a module-level
    `pytest.importorskip` of a missing test dependency is a collection error, not a silent skip."""
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.importorskip = strict_importorskip  # type: ignore[assignment]


__all__ = ["FIXTURES", "fixture_text", "offload_bytes_oracle"]


def fixture_text(rel: str) -> str:
    return (FIXTURES / rel).read_text(encoding="utf-8")


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def free_port() -> Callable[[], int]:
    """Call it for each loopback port a test needs: every call asks the OS for a fresh one."""
    return _pick_port


def pytest_addoption(parser: pytest.Parser) -> None:
    # `pytest tests/test_golden.py --update-golden` rewrites tests/golden/*.prom from the current code;
    # review the diff and record exposition changes in CHANGELOG.md ("Metrics").
    parser.addoption("--update-golden", action="store_true", help="rewrite tests/golden/*.prom instead of comparing")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))
