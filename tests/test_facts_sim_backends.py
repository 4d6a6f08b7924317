"""The simulator names its backends as the exporter does (ingest.backends.Backend, the `backend` label of
kvoffload_backend_info); a former spelling is a hidden alias with one deprecation line.

Why: `simulate --backend mooncake-store` produced a body the exporter reported as `mooncake_store`, so the
flag, the docs and the exporter's label named one backend two ways. These tests fail when a simulator
name that is not the exporter's comes back, in the code, the help or the docs.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from kvoffload_exporter.cli import build_parser
from kvoffload_exporter.config import flags
from kvoffload_exporter.config.flags import deprecations
from kvoffload_exporter.ingest.backends import Backend
from kvoffload_exporter.sim.backends import BACKEND_HELP, BACKENDS, FORMER_NAMES, NO_CONNECTOR, OFFLOAD_BACKENDS
from kvoffload_exporter.sim.faults import FAULTS
from kvoffload_exporter.sim.simulator import SimOptions

ROOT = Path(__file__).parent.parent
COMMANDS = ("simulate", "demo")
_BACKEND_FLAG = re.compile(r"--backend[ =]`?([a-z][a-z0-9_|-]*)")  # one name, or a list `a|b|c`
_GENERATED = re.compile(r"<!-- gen:([a-z-]+) -->(.*?)<!-- /gen -->", re.S)


@pytest.fixture(autouse=True)
def _fresh_notices(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test is its own process as far as the once-per-process notices go."""
    monkeypatch.setattr(flags, "WARNED", set())
    deprecations()


def _sub(command: str) -> argparse.ArgumentParser:
    (action,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    parser: argparse.ArgumentParser = action.choices[command]
    return parser


def test_every_simulated_offload_backend_is_an_exporter_backend() -> None:
    assert all(type(b) is Backend for b in OFFLOAD_BACKENDS)
    assert set(BACKENDS) == {*OFFLOAD_BACKENDS, *NO_CONNECTOR} and len(BACKENDS) == len(set(BACKENDS))
    # HiSparse is no offload backend: the exporter reports none for it, so its name must not be one either.
    assert not NO_CONNECTOR & {str(b) for b in Backend}
    assert all(b in {str(x) for x in Backend} for b in BACKENDS if b not in NO_CONNECTOR)


def test_a_former_name_is_an_alias_only() -> None:
    for old, new in FORMER_NAMES.items():
        assert type(new) is Backend and new in BACKENDS and old not in BACKENDS
    # No simulator name is an exporter name spelt otherwise (hyphens, case).
    exporter = {str(b).replace("-", "_").lower(): str(b) for b in Backend}
    for name in BACKENDS:
        assert exporter.get(name.replace("-", "_").lower(), name) == name


@pytest.mark.parametrize("command", COMMANDS)
def test_the_help_lists_the_exporter_names(command: str) -> None:
    assert list(BACKEND_HELP) == list(BACKENDS)
    (action,) = [a for a in _sub(command)._actions if "--backend" in a.option_strings]
    assert list(action.choices or ()) == list(BACKENDS) and action.default == Backend.NATIVE
    text = _sub(command).format_help()
    named = [n for t in (*FAULTS.values(), text) for m in _BACKEND_FLAG.finditer(t) for n in m.group(1).split("|")]
    assert named and set(named) <= set(BACKENDS)  # the faults' texts say which backend reports them
    for old in FORMER_NAMES:
        assert old not in text, f"{command} --help shows the former spelling {old}"


@pytest.mark.parametrize("command", COMMANDS)
def test_a_former_spelling_still_works_with_one_notice(command: str) -> None:
    for old, new in FORMER_NAMES.items():
        for form in (["--backend", old], [f"--backend={old}"]):
            args = build_parser().parse_args([command, *form])
            assert args.backend == new and SimOptions(backend=args.backend).check() == []
        assert deprecations() == [f"flag value --backend {old} is deprecated; use --backend {new}"]
    args = build_parser().parse_args([command, "--backend", str(Backend.MOONCAKE_STORE)])
    assert args.backend == Backend.MOONCAKE_STORE and deprecations() == []
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--backend", "kvbm"])  # an exporter backend the simulator lacks


def test_the_python_api_names_the_new_spelling() -> None:
    for old, new in FORMER_NAMES.items():
        assert SimOptions(backend=old).check() == [f"backend {old!r} is spelt {new} now"]


def _texts() -> list[tuple[str, str]]:
    """The package's sources and the hand-written documents (README's generated blocks cut out)."""
    out = [
        (str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in (ROOT / "kvoffload_exporter").rglob("*.py")
    ]
    for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        out.append((str(p.relative_to(ROOT)), _GENERATED.sub("", p.read_text(encoding="utf-8"))))
    return out


def test_every_backend_named_after_the_flag_is_a_simulator_name() -> None:
    """`--backend X` (or `--backend a|b|c`) in the code and the docs: each is one of the simulator's names;
    the help and the fault texts write theirs from the enum (test_the_help_lists_the_exporter_names)."""
    wrong = []
    for path, text in _texts():
        for m in _BACKEND_FLAG.finditer(text):
            wrong += [f"{path}: --backend {name}" for name in m.group(1).split("|") if name not in BACKENDS]
    assert not wrong, "\n".join(wrong)


def test_no_former_spelling_outside_the_alias_table() -> None:
    """A former spelling stands in its alias table, and in the docs only on a line that calls it that."""
    definition = "kvoffload_exporter/sim/backends.py"
    for old in FORMER_NAMES:
        pattern = re.compile(rf"(?<![\w-]){re.escape(old)}(?![\w-])")  # not a fixture folder (`…-0.33`)
        found = [
            f"{path}: {line.strip()}"
            for path, text in _texts()
            if path != definition
            for line in text.splitlines()
            if pattern.search(line) and not (path.endswith(".md") and "former spelling" in line)
        ]
        assert not found, f"{old} still spelt by hand:\n" + "\n".join(found)


def test_the_readme_block_is_the_simulator_names() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = {m.group(1): m.group(2) for m in _GENERATED.finditer(text)}
    assert blocks["sim-backends"] == "|".join(BACKENDS)
