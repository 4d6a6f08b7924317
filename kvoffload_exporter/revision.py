"""The source revision this process runs (`build_info{revision}`, `--version`): a `REVISION` file written into
the package at build time (the image does), else the git tree the package is imported from, else "unknown".

Read once, from files only (no `git` process): a checkout's HEAD, its ref file or `packed-refs`, and a
worktree's `gitdir:` pointer. Pure of the network; cheap enough for import time.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

UNKNOWN = "unknown"
_SHA = re.compile(r"[0-9a-f]{40}")
_PACKAGE = Path(__file__).resolve().parent


def _read(path: Path, limit: int = 4096) -> str | None:
    try:
        with path.open("rb") as f:
            return f.read(limit).decode("utf-8", "replace").strip()
    except OSError:
        return None


def _git_dir(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        dot = folder / ".git"
        if dot.is_dir():
            return dot
        text = _read(dot) if dot.is_file() else None  # a worktree: "gitdir: PATH"
        if text and text.startswith("gitdir:"):
            return (folder / text.split(":", 1)[1].strip()).resolve()
    return None


def _from_git(git: Path) -> str | None:
    head = _read(git / "HEAD")
    if head is None:
        return None
    if _SHA.fullmatch(head):
        return head
    if not head.startswith("ref:"):
        return None
    ref = head.split(":", 1)[1].strip()
    common = git
    if (pointer := _read(git / "commondir")) is not None:  # a worktree keeps its refs in the main .git
        common = (git / pointer).resolve()
    for base in (git, common):
        sha = _read(base / ref)
        if sha and _SHA.fullmatch(sha):
            return sha
        for line in (_read(base / "packed-refs", 1 << 20) or "").splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1] == ref and _SHA.fullmatch(parts[0]):
                return parts[0]
    return None


@cache
def revision(package: Path = _PACKAGE) -> str:
    """12 hex digits of the commit, or "unknown"."""
    written = _read(package / "REVISION", 64)
    if written and re.fullmatch(r"[0-9a-f]{7,40}", written):
        return written[:12]
    git = _git_dir(package)
    sha = _from_git(git) if git is not None else None
    return sha[:12] if sha else UNKNOWN


__all__ = ["UNKNOWN", "revision"]
