"""Output files are never written through a symbolic link planted in the output directory, and only
ever create or replace regular files: a device node, a FIFO, a socket or a directory at the path is
refused and left as it was."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from support.files import KINDS, same, special
from support.hang import fails_if_blocked

from kvoffload_exporter.canary.check import evidence
from kvoffload_exporter.cli import main
from kvoffload_exporter.safewrite import refusal, write_file


def test_writes_atomically_and_leaves_no_temp_file(tmp_path: Path) -> None:
    write_file(tmp_path / "a.txt", "one")
    write_file(tmp_path / "a.txt", b"two")
    assert (tmp_path / "a.txt").read_text() == "two"
    assert sorted(os.listdir(tmp_path)) == ["a.txt"]


def test_a_symlinked_target_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("keep")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "report.json").symlink_to(secret)
    with pytest.raises(OSError, match="symbolic link"):
        write_file(tmp_path / "out" / "report.json", "{}")
    assert secret.read_text() == "keep"
    assert sorted(os.listdir(tmp_path / "out")) == ["report.json"]  # no temp file left behind


def test_a_symlinked_directory_under_the_root_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "alerts").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(OSError, match="symbolic link"):
        write_file("alerts/rules.yaml", "x", root=out)
    assert os.listdir(elsewhere) == []


def test_relative_paths_may_not_climb_out_of_the_root(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="plain relative path"):
        write_file("../x", "x", root=tmp_path / "out")


def test_bundle_out_refuses_a_planted_link(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    victim = tmp_path / "victim.md"
    victim.write_text("mine")
    out = tmp_path / "out"
    (out / "docs").mkdir(parents=True)
    (out / "docs" / "metrics.md").symlink_to(victim)
    assert main(["bundle", "--out", str(out)]) == 2  # a bad path, found before anything is written
    assert victim.read_text() == "mine"
    assert "symbolic link" in capsys.readouterr().err
    assert sorted(p.name for p in out.rglob("*")) == ["docs", "metrics.md"]


def test_bundle_out_still_writes_a_fresh_directory(tmp_path: Path) -> None:
    assert main(["bundle", "--out", str(tmp_path / "fresh")]) == 0
    assert (tmp_path / "fresh" / "docs" / "metrics.md").is_file()


def _evidence(doc: dict[str, Any]) -> evidence.Evidence:
    return evidence.Evidence(result=None, doc=doc, text="", argv={})  # type: ignore[arg-type]  # --json needs doc only


def test_check_json_refuses_a_symlinked_path(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("mine")
    (tmp_path / "check.json").symlink_to(victim)
    with pytest.raises(OSError, match="symbolic link"):
        evidence.write(_evidence({"verdict": "x"}), str(tmp_path / "check.json"), None)
    assert victim.read_text() == "mine"
    evidence.write(_evidence({"verdict": "x"}), str(tmp_path / "plain.json"), None)
    assert '"verdict": "x"' in (tmp_path / "plain.json").read_text()


@pytest.mark.parametrize("kind", KINDS)
def test_a_non_regular_target_is_refused_and_left_as_it_was(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "check.json"
    with special(target, kind):
        before = os.lstat(target)
        assert refusal(target) is not None and "not a regular file" in str(refusal(target))
        with pytest.raises(OSError, match="not a regular file"):
            write_file(target, "{}")
        assert same(target, before)
        assert sorted(os.listdir(tmp_path)) == ["check.json"]  # no temp file left behind


def test_refusal_is_none_for_what_can_be_written(tmp_path: Path) -> None:
    assert refusal(tmp_path / "new.json") is None
    (tmp_path / "old.json").write_text("x")
    assert refusal(tmp_path / "old.json") is None
    assert refusal("a/b/c.txt", root=tmp_path / "fresh") is None
    (tmp_path / "file").write_text("x")
    assert "not a directory" in str(refusal("c.txt", root=tmp_path / "file"))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "alerts").write_text("x")
    assert "not a directory" in str(refusal("alerts/rules.yaml", root=tmp_path / "sub"))


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_bundle_out_refuses_a_planted_special_file_before_writing_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    out = tmp_path / "out"
    (out / "docs").mkdir(parents=True)
    with special(out / "docs" / "metrics.md", kind):
        before = os.lstat(out / "docs" / "metrics.md")
        assert main(["bundle", "--out", str(out)]) == 2
        assert same(out / "docs" / "metrics.md", before)
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "not a regular file" in err
    assert sorted(p.name for p in out.rglob("*")) == ["docs", "metrics.md"]


def test_bundle_check_does_not_wait_on_a_planted_fifo(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "docs").mkdir(parents=True)
    os.mkfifo(out / "docs" / "metrics.md")  # no writer: a blocking open would wait forever
    with fails_if_blocked():
        assert main(["bundle", "--out", str(out), "--check"]) == 1  # stale, not stuck
