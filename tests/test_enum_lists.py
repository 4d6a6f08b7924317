"""Every list of states, reasons and actions is generated from its enum: the HELP texts, the dashboard
timelines (by explicit values, never by enum position), docs/metrics.md, the README and the runbook.

Why: the `kvoffload_state` HELP text named five of the six states (it left out `not_storing`), and the
dashboard encoded each state by its position in the enum, so a new state would renumber the others.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from support.boards import panels

from kvoffload_exporter.bundle.grafana import dashboards, reason_panels
from kvoffload_exporter.bundle.texts import readme, reasons_runbook
from kvoffload_exporter.catalogue import CATALOGUE
from kvoffload_exporter.derive.reasons import HINTS
from kvoffload_exporter.enums import Recommendation, State, StateReason

ROOT = Path(__file__).parent.parent
STATE_PANEL = "Offload evidence state per engine"
REASON_PANEL = "Why this engine stores without loading"


def _help(name: str) -> str:
    return CATALOGUE[name].help


def _panel(board: dict[str, Any], title: str) -> tuple[dict[int, str], str]:
    """The timeline's value → text mapping and its query."""
    p = next(p for p in panels(board) if p.get("title") == title)
    (mapping,) = p["fieldConfig"]["defaults"]["mappings"]
    return {int(v): o["text"] for v, o in mapping["options"].items()}, p["targets"][0]["expr"]


@pytest.mark.parametrize("state", list(State))
def test_each_state_is_in_every_list(state: State) -> None:
    assert re.search(rf"\b{state}\b", _help("kvoffload_state")), "kvoffload_state HELP"
    metrics_doc = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    assert f"`{state}`" in next(line for line in metrics_doc.splitlines() if line.startswith("- `state`:"))
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"| `{state}` |" in text and text.count(f"`{state}`") >= 3  # two lists and the table
    board = json.loads((ROOT / "dashboards" / "kvoffload-overview.json").read_text(encoding="utf-8"))
    mapping, _ = _panel(board, STATE_PANEL)
    value = dashboards.STATE_VALUES[state][0]
    assert mapping[value] == state.replace("_", " ")


@pytest.mark.parametrize("reason", list(StateReason))
def test_each_reason_is_in_every_list(reason: StateReason) -> None:
    assert reason in HINTS
    runbook = (ROOT / "alerts" / "runbook.md").read_text(encoding="utf-8")
    assert f"#### Reason {reason}\n" in runbook
    metrics_doc = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    assert f"`{reason}`" in metrics_doc
    board = json.loads((ROOT / "dashboards" / "kvoffload-overview.json").read_text(encoding="utf-8"))
    mapping, _ = _panel(board, REASON_PANEL)
    assert mapping[reason_panels.REASON_VALUES[reason][0]] == reason.replace("_", " ")


@pytest.mark.parametrize("action", list(Recommendation))
def test_each_recommendation_is_in_every_list(action: Recommendation) -> None:
    assert re.search(rf"\b{action}\b", _help("kvoffload_recommendation"))
    metrics_doc = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    assert f"`{action}`" in next(line for line in metrics_doc.splitlines() if line.startswith("- `recommendation`:"))


def test_the_reason_help_names_every_state_that_has_reasons() -> None:
    from kvoffload_exporter.derive.reasons import RULES_BY_STATE

    for state in RULES_BY_STATE:
        assert state in _help("kvoffload_state_reason")


def test_the_timelines_encode_each_value_explicitly_not_by_enum_position(monkeypatch: pytest.MonkeyPatch) -> None:
    """Renumber the explicit values: the panels follow them (the enum order did not change)."""
    shuffled = {s: (len(State) - 1 - v, c) for s, (v, c) in dashboards.STATE_VALUES.items()}
    monkeypatch.setattr(dashboards, "STATE_VALUES", shuffled)
    reasons = {r: (100 + v, c) for r, (v, c) in reason_panels.REASON_VALUES.items()}
    monkeypatch.setattr(reason_panels, "REASON_VALUES", reasons)
    board = dashboards.overview()
    mapping, expr = _panel(board, STATE_PANEL)
    assert mapping == {v: s.replace("_", " ") for s, (v, _) in shuffled.items()}
    assert f'state="{State.NOT_CONFIGURED}"}} * {len(State) - 1}' in expr and f'state="{State.HIT}"' not in expr
    mapping, expr = _panel(board, REASON_PANEL)
    assert mapping == {0: "nothing to explain", **{v: r.replace("_", " ") for r, (v, _) in reasons.items()}}
    assert f'reason="{StateReason.METRIC_MISSING}"}} * 101' in expr


def test_a_new_member_without_its_value_or_meaning_fails_the_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """A member added to the enum reaches every generator; one that has no value, colour or meaning there
    stops the bundle instead of being left out (or numbered by position)."""
    new = "new_state"
    monkeypatch.setattr(dashboards, "STATES", (*State, new))
    with pytest.raises(KeyError, match=new):
        dashboards.state_values()
    monkeypatch.setattr("kvoffload_exporter.catalogue.STATES", (*State, new))
    assert f"`{new}`" in readme.BLOCKS["states"]()
    with pytest.raises(KeyError, match=new):
        readme.BLOCKS["state-table"]()
    monkeypatch.setattr(reason_panels, "STATE_REASONS", (*StateReason, "new_reason"))
    with pytest.raises(KeyError, match="new_reason"):
        reason_panels.reason_values()
    monkeypatch.setattr(reasons_runbook, "StateReason", [*StateReason, "new_reason"])
    with pytest.raises(KeyError, match="new_reason"):
        reasons_runbook.render()


def test_timeline_values_are_unique(monkeypatch: pytest.MonkeyPatch) -> None:
    clash = {**dashboards.STATE_VALUES, State.HIT: (dashboards.STATE_VALUES[State.IDLE][0], "green")}
    monkeypatch.setattr(dashboards, "STATE_VALUES", clash)
    with pytest.raises(ValueError, match="not unique"):
        dashboards.state_values()
