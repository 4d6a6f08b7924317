"""Non-regular files to point outputs and inputs at: a FIFO, a socket, a directory, a character device."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

KINDS = ["fifo", "socket", "directory", "device"]


@contextlib.contextmanager
def special(path: Path, kind: str) -> Iterator[None]:
    """A non-regular file at `path`: fifo, socket, directory or a private character device (1, 3 is
    /dev/null's number: mknod needs root, skipped without it)."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "device":
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("mknod of a character device needs root")
    if kind == "socket":
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(path))
            yield
    else:
        yield


def same(path: Path, before: os.stat_result) -> bool:
    """`path` is still the very file `before` described (kind, inode, device number)."""
    after = os.lstat(path)
    return (after.st_mode, after.st_ino, after.st_rdev) == (before.st_mode, before.st_ino, before.st_rdev)
