"""Memory bounded under label churn: a target whose `model_name` changes on every poll keeps at most its
budget of (model_name, engine) keys in its history (twice its engines now and a little, at most twice
`engine_limit`); older points are dropped and counted in kvoffload_exporter_label_churn_total, and the
formatted series of gone engines are not kept."""

from __future__ import annotations

from conftest import fixture_text

from kvoffload_exporter.config.limits import Limits
from kvoffload_exporter.config.settings import Config, TargetConfig
from kvoffload_exporter.server.logbudget import BOUNDS
from kvoffload_exporter.server.targetpoller import CHURN_FACTOR, CHURN_SLACK, TargetPoller

BODY = fixture_text("h200-0.6b/A_12_final.prom")
ENGINES = 4


def _poller(window: float = 300.0) -> TargetPoller:
    cfg = Config(
        gpu_enabled=False, host_enabled=False, poll_interval=0.5, window=window, limits=Limits(engine_limit=ENGINES)
    )
    return TargetPoller(TargetConfig(url="http://127.0.0.1:9", name="churn"), cfg)


def _name(i: int) -> str:
    return f"{i:06d}" + "m" * 904  # 910 characters, under the label value cap


def test_history_holds_at_most_the_key_budget_and_counts_the_rest() -> None:
    poller = _poller()
    before = BOUNDS.label_churn
    for i in range(40):
        poller.ingest(BODY.replace("Qwen/Qwen3-0.6B", _name(i)), now=1000.0 + i / 2)
    budget = CHURN_FACTOR * 1 + CHURN_SLACK  # one engine now
    keys = {k for m in poller.history for k in m.totals}
    assert len(keys) <= budget
    assert len(poller.history) == budget  # one key per point: one point per key of budget
    assert BOUNDS.label_churn - before == 40 - budget
    assert len(poller._heads) < 2_000


def test_a_model_renamed_once_keeps_both_names_within_the_window() -> None:
    poller = _poller(window=30.0)
    before = BOUNDS.label_churn
    for i in range(40):
        poller.ingest(BODY.replace("Qwen/Qwen3-0.6B", "old" if i < 20 else "new"), now=1000.0 + i / 2)
    assert BOUNDS.label_churn == before and len(poller.history) == 40


def test_a_steady_target_keeps_its_whole_window() -> None:
    poller = _poller(window=30.0)
    before = BOUNDS.label_churn
    for i in range(80):
        poller.ingest(BODY, now=1000.0 + i / 2)
    assert len(poller.history) == poller.config.history_len and BOUNDS.label_churn == before
