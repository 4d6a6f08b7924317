"""Writes that stay inside their directory and only ever create or replace regular files.

An output directory may be shared (a CI workspace, a report folder others can write to); a link planted
there as `report.json -> ~/.ssh/authorized_keys` must not turn `check --out` into a write anywhere.
Each file is written to a fresh temporary file in its own directory (O_EXCL, O_NOFOLLOW) and renamed
over the target, so a reader never sees half a file; a target that is a symlink is refused, and so is a
symlinked directory between the output root and the file. Directories are walked by descriptor, so a
link swapped in between the check and the write is not followed either.

A rename replaces whatever has the name, so a target that exists and is not a regular file (a device
node such as `/dev/null`, a FIFO, a socket, a directory) is refused too: run as root, `--json
/dev/null` would otherwise replace the system's `/dev/null` with a file. `refusal` is the same test
for commands that check their output paths before doing any work.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import PurePath

from kvoffload_exporter.saferead import kind

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _refuse(shown: str) -> OSError:
    return OSError(errno.ELOOP, f"refusing to write through the symbolic link {shown}")


def _not_regular(shown: str, mode: int) -> OSError:
    return OSError(errno.EEXIST, f"refusing to replace {shown}: it is {kind(mode)}, not a regular file")


def _why(shown: str, mode: int, last: bool) -> str | None:
    if stat.S_ISLNK(mode):
        return f"{shown} is a symbolic link (refused: a write would go through it)"
    if last and not stat.S_ISREG(mode):
        return f"{shown} is {kind(mode)}, not a regular file"
    if not last and not stat.S_ISDIR(mode):
        return f"{shown} is {kind(mode)}, not a directory"
    return None


def refusal(path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> str | None:
    """Why `write_file(path, …, root)` would be refused, or None: a symlink on the way (below `root`,
    or the file itself without one), or a file there that is not a regular one. Nothing is created.
    The reason starts with the path it is about (`path` as given, without `root`)."""
    parts = list(PurePath(path).parts) if root is not None else [PurePath(path).name]
    top = os.fspath(root) if root is not None else str(PurePath(path).parent)
    with contextlib.suppress(OSError):  # the root may be a link (the operator's choice), not a file
        if not stat.S_ISDIR(os.stat(top).st_mode):
            return f"{top} is {kind(os.stat(top).st_mode)}, not a directory"
    for i in range(len(parts)):
        shown = os.path.join(top, *parts[: i + 1]) if root is not None else os.fspath(path)
        try:
            mode = os.lstat(shown).st_mode
        except OSError:
            return None  # missing: created; unreadable: the write says why
        why = _why(shown, mode, i == len(parts) - 1)
        if why:
            return why
    return None


def _open_dir(parent: int, name: str, shown: str, create: bool) -> int:
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=parent)
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR) and stat.S_ISLNK(os.lstat(name, dir_fd=parent).st_mode):
            raise _refuse(shown) from None
        raise


def write_file(path: str | os.PathLike[str], data: str | bytes, root: str | os.PathLike[str] | None = None) -> None:
    """Write `data` to `path` atomically, never through a symlink.

    With `root`, `path` is relative to it and no directory below `root` may be a symlink (missing ones
    are created); without, the parent directory is the caller's choice (created if missing) and only
    the file itself may not be a link. Raises OSError (ELOOP for a refused link)."""
    if root is None:
        full = PurePath(path)
        top, parts = str(full.parent), [full.name]
        os.makedirs(top, exist_ok=True)
    else:
        top, parts = os.fspath(root), list(PurePath(path).parts)
        os.makedirs(top, exist_ok=True)
    if any(p in ("", ".", "..") for p in parts) or PurePath(*parts).is_absolute():
        raise OSError(errno.EINVAL, f"not a plain relative path: {path}")
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, name in enumerate(parts[:-1]):
            nxt = _open_dir(fd, name, os.path.join(top, *parts[: i + 1]), create=True)
            os.close(fd)
            fd = nxt
        _write_in(fd, parts[-1], os.path.join(top, *parts), data.encode() if isinstance(data, str) else data)
    finally:
        os.close(fd)


def _write_in(dfd: int, name: str, shown: str, data: bytes) -> None:
    try:
        mode = os.lstat(name, dir_fd=dfd).st_mode
    except FileNotFoundError:
        mode = stat.S_IFREG
    if stat.S_ISLNK(mode):
        raise _refuse(shown)
    if not stat.S_ISREG(mode):  # a rename would replace a device node, a FIFO, a socket
        raise _not_regular(shown, mode)
    tmp = f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    tfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dfd)
    try:
        with os.fdopen(tfd, "wb") as f:
            f.write(data)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)  # replaces a link itself, never its target
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dfd)
        raise


__all__ = ["refusal", "write_file"]
