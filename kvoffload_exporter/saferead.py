"""Reading an operator's file that cannot hang or flood the process: regular files only, under a cap.

Every file the exporter reads on an operator's word (`--config.file`, `--web.config.file`, password, token
and API-key files, the canary secret, the dumps given to `inspect`) comes through `read_regular`:

- the path is stat'ed first and anything but a regular file (a FIFO, a device such as `/dev/zero`, a
  socket, a directory) is refused unopened: opening a FIFO waits for a writer, a tape device rewinds;
- the open itself is non-blocking (O_NONBLOCK) and the open file is fstat'ed again, so a FIFO swapped
  in between the two looks is refused too; O_NOFOLLOW where a link must not be followed;
- the size is checked on the open file and enforced while reading, so a file that grows is cut at
  the cap and refused, never read to its end.

A refusal is one short reason (`is a FIFO, not a regular file`) that callers prefix with what and
where; it never quotes a byte of the file.
"""

from __future__ import annotations

import errno
import os
import stat

_KINDS = (
    (stat.S_ISREG, "a regular file"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
)


class FileRefused(Exception):
    """Why a file was not read, in a few words without its content (`str()` is the reason);
    `strerror` is the system's word when the file could not be opened or read at all."""

    def __init__(self, reason: str, strerror: str | None = None) -> None:
        super().__init__(reason)
        self.strerror = strerror


def kind(mode: int) -> str:
    """`a FIFO`, `a character device`, …: what a file is, for one-line refusals."""
    return next((name for test, name in _KINDS if test(mode)), "an unknown kind of file")


def read_regular(path: str | os.PathLike[str], max_bytes: int, *, follow_links: bool = True) -> bytes:
    """The bytes of the regular file `path`, at most `max_bytes` of them; FileRefused otherwise.

    `follow_links=False` refuses a path that is itself a symbolic link (a link in a directory above
    it is still followed, as the operator wrote it)."""
    try:
        st = os.stat(path, follow_symlinks=follow_links)
    except OSError as e:
        raise _why(e, path) from None
    if not stat.S_ISREG(st.st_mode):
        raise FileRefused(f"is {kind(st.st_mode)}, not a regular file")
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise _why(e, path) from None
    try:
        st = os.fstat(fd)  # what was opened, not what was looked at: a swap in between is caught here
        if not stat.S_ISREG(st.st_mode):
            raise FileRefused(f"is {kind(st.st_mode)}, not a regular file")
        if st.st_size > max_bytes:
            raise FileRefused(f"is {st.st_size:,} bytes, over the {max_bytes:,}-byte cap")
        chunks, got = [], 0
        while got <= max_bytes:
            chunk = os.read(fd, max_bytes + 1 - got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    except OSError as e:
        raise _why(e, path) from None
    finally:
        os.close(fd)
    if got > max_bytes:  # it grew while being read
        raise FileRefused(f"is over the {max_bytes:,}-byte cap")
    return b"".join(chunks)


def _why(e: OSError, path: str | os.PathLike[str]) -> FileRefused:
    if e.errno == errno.ELOOP and os.path.islink(path):
        return FileRefused("is a symbolic link")
    strerror = e.strerror or type(e).__name__
    return FileRefused(f"cannot be read: {strerror}", strerror)


__all__ = ["FileRefused", "kind", "read_regular"]
