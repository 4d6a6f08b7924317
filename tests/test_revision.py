"""`build_info{revision}` and `--version`: a build-time REVISION file, else the git tree, else "unknown"."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kvoffload_exporter.revision import UNKNOWN, revision

SHA = "0123456789abcdef0123456789abcdef01234567"


def _package(root: Path) -> Path:
    pkg = root / "src" / "kvoffload_exporter"
    pkg.mkdir(parents=True)
    return pkg


def test_a_written_revision_file_wins(tmp_path: Path) -> None:
    pkg = _package(tmp_path)
    (pkg / "REVISION").write_text(SHA + "\n")
    assert revision.__wrapped__(pkg) == SHA[:12]


def test_a_checkout_branch_ref_loose_and_packed(tmp_path: Path) -> None:
    pkg = _package(tmp_path)
    git = tmp_path / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "packed-refs").write_text(f"# pack-refs with: peeled\n{SHA} refs/heads/main\n")
    assert revision.__wrapped__(pkg) == SHA[:12]
    (git / "refs" / "heads" / "main").write_text("f" * 40 + "\n")  # a loose ref is newer than the packed one
    assert revision.__wrapped__(pkg) == "f" * 12


def test_a_worktree_follows_its_gitdir_pointer(tmp_path: Path) -> None:
    pkg = _package(tmp_path / "wt")
    main = tmp_path / "main.git"
    (main / "worktrees" / "wt").mkdir(parents=True)
    (main / "refs" / "heads").mkdir(parents=True)
    (main / "refs" / "heads" / "topic").write_text(SHA)
    (main / "worktrees" / "wt" / "HEAD").write_text("ref: refs/heads/topic\n")
    (main / "worktrees" / "wt" / "commondir").write_text("../..\n")
    (tmp_path / "wt" / ".git").write_text(f"gitdir: {main / 'worktrees' / 'wt'}\n")
    assert revision.__wrapped__(pkg) == SHA[:12]


def test_nothing_to_read_is_unknown(tmp_path: Path) -> None:
    assert revision.__wrapped__(_package(tmp_path)) == UNKNOWN  # no REVISION file, no .git above a temp dir


def test_version_names_the_revision_of_this_checkout() -> None:
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False).stdout.strip()
    out = subprocess.run([sys.executable, "-m", "kvoffload_exporter", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("kvoffload-exporter 0.1.0 (revision ")
    if head:  # a clean clone or a checkout: the revision is HEAD's
        assert f"(revision {head[:12]})" in out.stdout
