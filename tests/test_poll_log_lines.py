"""The log says when a target answers again after failing, and when an engine restarted (its counters went
back): an SRE reading the log sees the recovery, not only the failures."""

from __future__ import annotations

import logging

import pytest
from conftest import fixture_text

from kvoffload_exporter.config.settings import Config, TargetConfig
from kvoffload_exporter.server.targetpoller import TargetPoller
from kvoffload_exporter.sources.vllm_http import ScrapeError

FIRST, LATER = fixture_text("h200-0.6b/A_02_after_cold.prom"), fixture_text("h200-0.6b/A_12_final.prom")


def _poller() -> TargetPoller:
    return TargetPoller(TargetConfig(url="http://127.0.0.1:9", name="t"), Config(gpu_enabled=False, host_enabled=False))


def test_a_recovery_is_one_info_line_with_the_failures_it_ends(caplog: pytest.LogCaptureFixture) -> None:
    p = _poller()
    caplog.set_level(logging.INFO, logger="kvoffload")
    p.ingest(FIRST, 100.0)
    for _ in range(3):
        p._failed(ScrapeError("connect", "connection refused"), None, p.timer())
    p.ingest(LATER, 130.0)
    lines = [r.getMessage() for r in caplog.records if "recovered" in r.getMessage()]
    assert lines == ["target t recovered after 3 failed poll(s) (last: connect)"]
    p.ingest(LATER, 140.0)
    assert sum("recovered" in r.getMessage() for r in caplog.records) == 1  # once, not every poll after


def test_counters_going_back_are_logged_as_an_engine_restart(caplog: pytest.LogCaptureFixture) -> None:
    p = _poller()
    caplog.set_level(logging.INFO, logger="kvoffload")
    p.ingest(LATER, 100.0)
    p.ingest(LATER, 110.0)
    assert not [r for r in caplog.records if "restarted" in r.getMessage()]
    p.ingest(FIRST, 120.0)  # an earlier body: every counter lower, as after a restart
    (line,) = [r.getMessage() for r in caplog.records if "restarted" in r.getMessage()]
    assert line.startswith("target t: engine ") and line.endswith(" restarted (its counters went back)")
