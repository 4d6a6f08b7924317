"""Each evidence state's meaning is written once (catalogue.STATE_MEANINGS) and generated where it is listed:
the README's state table, the overview dashboard's state panel and the `not_storing_for` alert setting.

Why: the meanings were written twice, in the dashboard (short) and in the README (longer), and had drifted
apart (`storing` said "no reuse visible, also the warm-up state" in one and "no observable reuse" in the
other). These tests fail when a generated text drifts from the definition or a hand-written copy comes back.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.boards import panels

from kvoffload_exporter.bundle.texts import readme
from kvoffload_exporter.catalogue import STATE_MEANINGS, STATES
from kvoffload_exporter.enums import State

ROOT = Path(__file__).parent.parent
PACKAGE = ROOT / "kvoffload_exporter"
DEFINITION = PACKAGE / "catalogue" / "derived.py"
STATE_PANEL = "Offload evidence state per engine"
_GENERATED = re.compile(r"<!-- gen:([a-z-]+) -->(.*?)<!-- /gen -->", re.S)


def _hand_written_docs() -> Iterator[tuple[Path, str]]:
    """README.md and the documents not generated as a whole, with their generated blocks cut out."""
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "alerts" / "runbook.md"]:
        text = path.read_text(encoding="utf-8")
        if "by `kvoffload-exporter bundle`; do not edit." not in text[:400]:
            yield path, _GENERATED.sub("", text)


def test_every_state_has_one_meaning() -> None:
    assert list(STATE_MEANINGS) == list(STATES) == list(State)
    for state, meaning in STATE_MEANINGS.items():
        assert meaning.strip() == meaning and meaning, state
        assert "; " not in meaning, f"{state}: '; ' separates the states in the dashboard's description"
    assert len(set(STATE_MEANINGS.values())) == len(STATE_MEANINGS)


@pytest.mark.parametrize("state", list(State))
def test_the_readme_table_row_is_the_definition(state: State) -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = {m.group(1): m.group(2) for m in _GENERATED.finditer(text)}
    row = f"| `{state}` | {STATE_MEANINGS[state]} |"
    assert row in blocks["state-table"].splitlines()
    assert blocks["state-table"] == readme.BLOCKS["state-table"]()  # the committed block is what renders now
    assert text.count(STATE_MEANINGS[state]) == 1, "the meaning is written once in the README: in its table"


@pytest.mark.parametrize("state", list(State))
def test_the_dashboard_panel_says_the_definition(state: State) -> None:
    board = json.loads((ROOT / "dashboards" / "kvoffload-overview.json").read_text(encoding="utf-8"))
    panel = next(p for p in panels(board) if p.get("title") == STATE_PANEL)
    assert f"{state.replace('_', ' ')} = {STATE_MEANINGS[state]}" in panel["description"]


def test_the_not_storing_setting_says_the_definition() -> None:
    from kvoffload_exporter.bundle.settings import doc_of

    assert STATE_MEANINGS[State.NOT_STORING] in doc_of("not_storing_for")
    assert STATE_MEANINGS[State.NOT_STORING] in (ROOT / "docs" / "alerts.md").read_text(encoding="utf-8")


def test_no_hand_written_table_of_states_in_the_docs() -> None:
    """Outside the generated blocks, no document copies a meaning word for word, and the README has no
    hand-written table row per state (`| \\`idle\\` | …`)."""
    for path, text in _hand_written_docs():
        rel = path.relative_to(ROOT)
        for state in State:
            if path.name == "README.md":  # elsewhere `idle` is also a canary load band
                assert not re.search(rf"^\| `{state}` \|", text, re.M), f"{rel}: a hand-written row for {state}"
            assert STATE_MEANINGS[state] not in text, f"{rel}: {state}'s meaning copied by hand"


def _prose(node: ast.AST) -> bool:
    """A string constant with a space in it: prose, not a colour or a name."""
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and " " in n.value for n in ast.walk(node))


def _state_key(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "State":
        return node.attr.lower()
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in set(State):
        return node.value
    return None


def _copies(tree: ast.AST) -> Iterator[str]:
    """Dicts keyed by (most of) the states with prose among their values, and strings that hold a meaning."""
    meanings = [m[:40] for m in STATE_MEANINGS.values()]  # the first 40 characters of each are distinctive
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys = {k for k in map(_state_key, node.keys) if k}
            if len(keys) * 2 >= len(State) and any(_prose(v) for v in node.values):
                yield f"line {node.lineno}: a mapping of states to prose"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and any(m in node.value for m in meanings):
            yield f"line {node.lineno}: a state's meaning"


def test_no_second_hand_written_copy_in_the_code() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == DEFINITION:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += [f"{path.relative_to(ROOT)} {c}" for c in _copies(tree)]
    assert not found, "state meanings belong in catalogue.STATE_MEANINGS only:\n" + "\n".join(found)


def test_the_copy_check_sees_the_old_copies() -> None:
    """The two shapes the meanings had before (the README's dict by value, the dashboard's tuples by member)."""
    old_readme = 'M = {"idle": "nothing moved", "hit": "loads happened", "storing": "x y", "not_storing": "a b"}'
    old_board = 'V = {State.IDLE: (1, "blue", "nothing moved"), State.HIT: (5, "green", "loads"), State.STORING: 0}'
    assert list(_copies(ast.parse(old_readme))) and list(_copies(ast.parse(old_board)))
    colours = 'V = {State.IDLE: (1, "blue"), State.HIT: (5, "green"), State.STORING: (3, "yellow")}'
    assert not list(_copies(ast.parse(colours)))
    pasted = f"X = {STATE_MEANINGS[State.HIT]!r}"
    assert list(_copies(ast.parse(pasted)))
