"""The README's counts and lists (alerts, metric families, scrape-error reasons, states, simulator faults,
backends, calibrations) are generated blocks that `bundle --out . --check` (the drift test) compares."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from kvoffload_exporter.bundle.alerting.rules import build
from kvoffload_exporter.bundle.texts import readme
from kvoffload_exporter.catalogue import CATALOGUE
from kvoffload_exporter.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_committed_readme_blocks_are_current():
    assert readme.patch(README) == README, "regenerate with `kvoffload-exporter bundle --out .`"


def test_every_generator_has_a_block_in_the_readme():
    used = set(re.findall(r"<!-- gen:([a-z-]+) -->", README))
    assert used == set(readme.BLOCKS)


def test_the_alert_and_metric_counts_are_the_codes():
    _, alerts = build()
    assert f"{len(alerts)} alerts (" in README
    assert all(f"`{a.alert}`" in README for a in alerts)
    assert f"{len(CATALOGUE)} metric families" in README


def test_a_stale_count_fails_the_drift_check(tmp_path, capsys):
    pytest.importorskip("grafanalib")
    assert main(["bundle", "--out", str(tmp_path)]) == 0
    assert not (tmp_path / "README.md").exists()  # a user's directory gets no README
    stale = README.replace(f"{len(build()[1])} alerts (", "13 alerts (")
    (tmp_path / "README.md").write_text(stale, encoding="utf-8")
    assert main(["bundle", "--out", str(tmp_path), "--check"]) == 1
    assert "stale: README.md" in capsys.readouterr().err
    assert main(["bundle", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "README.md").read_text(encoding="utf-8") == README


def test_a_readme_without_blocks_is_left_alone(tmp_path):
    pytest.importorskip("grafanalib")
    (tmp_path / "README.md").write_text("# my monitoring\n13 alerts\n", encoding="utf-8")
    assert main(["bundle", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "README.md").read_text(encoding="utf-8") == "# my monitoring\n13 alerts\n"


def test_an_unknown_block_is_one_line_and_exit_2(tmp_path, capsys):
    pytest.importorskip("grafanalib")
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    (tmp_path / "README.md").write_text("<!-- gen:nope -->x<!-- /gen -->\n", encoding="utf-8")
    assert main(["bundle", "--out", str(tmp_path)]) == 2
    assert "unknown generated block 'nope'" in capsys.readouterr().err
