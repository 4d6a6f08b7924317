"""Writes that stay inside their directory: no output file is ever written through a symbolic link.

An output directory may be shared (a CI workspace, a report folder others can write to); a link planted
there as `report.json -> ~/.ssh/authorized_keys` must not turn `check --out` into a write anywhere.
Each file is written to a fresh temporary file in its own directory (O_EXCL, O_NOFOLLOW) and renamed
over the target, so a reader never sees half a file; a target that is a symlink is refused, and so is a
symlinked directory between the output root and the file. Directories are walked by descriptor, so a
link swapped in between the check and the write is not followed either.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import PurePath

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _refuse(shown: str) -> OSError:
    return OSError(errno.ELOOP, f"refusing to write through the symbolic link {shown}")


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
        if stat.S_ISLNK(os.lstat(name, dir_fd=dfd).st_mode):
            raise _refuse(shown)
    except FileNotFoundError:
        pass
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


__all__ = ["write_file"]
