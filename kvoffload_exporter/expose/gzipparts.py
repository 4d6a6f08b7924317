"""gzip of a large body in parts, compressed at once on several cores, as one standard gzip member.

Each part is raw deflate from a compressor of its own (no back-reference into an earlier part); every
part but the last ends with a sync flush (byte-aligned, not final), so the parts joined are one valid
deflate stream, and the gzip header and trailer (CRC-32 and size of the whole body) wrap it. Any gzip
reader reads it as one member. What is lost is each later part's first 32 KiB of history: the ratio
changes by well under 1 % at 9.4 MB (1,000 targets), where one level-1 pass takes ~43 ms of one core.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x04\xff"
"""Deflate, no flags, no mtime, XFL 4 (fastest compression), OS 255 (unknown)."""


def split(body: bytes, parts: int) -> list[memoryview]:
    """`body` in at most `parts` pieces of about equal size, each cut after a newline (views, no copies)."""
    view = memoryview(body)
    out, start = [], 0
    for i in range(1, parts):
        cut = body.find(b"\n", max(start, len(body) * i // parts)) + 1
        if cut <= start:  # no newline left: the rest is one piece
            break
        out.append(view[start:cut])
        start = cut
    out.append(view[start:])
    return out


def deflate(part: memoryview | bytes, level: int, last: bool) -> bytes:
    """Raw deflate of one part: the last one ends the stream, the others end on a byte boundary."""
    c = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    return c.compress(part) + c.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


def wrap(deflated: Sequence[bytes], crc: int, size: int) -> bytes:
    """One gzip member around the parts' deflate streams, in order."""
    return b"".join((HEADER, *deflated, struct.pack("<II", crc & 0xFFFFFFFF, size & 0xFFFFFFFF)))


__all__ = ["HEADER", "deflate", "split", "wrap"]
