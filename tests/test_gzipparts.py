"""A large body gzipped in parts is one standard gzip member: every reader gets the body back whole."""

from __future__ import annotations

import asyncio
import gzip
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload_exporter.expose import gzipparts
from kvoffload_exporter.server import expocache


def _parts_gzip(body: bytes, parts: int) -> bytes:
    pieces = gzipparts.split(body, parts)
    deflated = [gzipparts.deflate(p, 1, i == len(pieces) - 1) for i, p in enumerate(pieces)]
    return gzipparts.wrap(deflated, zlib.crc32(body), len(body))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=40).map(b"\n".join), st.integers(1, 5))
def test_parts_joined_are_one_member_that_reads_back_whole(body: bytes, parts: int) -> None:
    out = _parts_gzip(body, parts)
    assert gzip.decompress(out) == body
    d = zlib.decompressobj(zlib.MAX_WBITS | 16)  # one member: nothing after its trailer
    assert d.decompress(out) == body and d.eof and d.unused_data == b""


def test_pieces_are_cut_after_newlines_and_cover_the_body_once() -> None:
    body = b"".join(b"series_%d 1.0\n" % i for i in range(1000))
    pieces = gzipparts.split(body, 4)
    assert len(pieces) == 4
    assert b"".join(pieces) == body
    assert all(bytes(p).endswith(b"\n") for p in pieces)


def test_a_body_without_newlines_is_one_piece() -> None:
    assert [bytes(p) for p in gzipparts.split(b"x" * 100, 3)] == [b"x" * 100]


def test_a_wrong_crc_is_refused_by_a_reader() -> None:
    body = b"a 1.0\n" * 100
    pieces = gzipparts.split(body, 2)
    out = gzipparts.wrap([gzipparts.deflate(p, 1, i == 1) for i, p in enumerate(pieces)], 0, len(body))
    with pytest.raises(gzip.BadGzipFile):
        gzip.decompress(out)


def test_the_exporter_gzips_a_large_body_in_parts_that_read_back_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(expocache, "_PARTS", 3)
    body = b"".join(b'kvoffload_up{target="t%06d"} 1.0\n' % i for i in range(40_000))  # > 1 MiB
    assert len(body) > 1 << 20
    out = asyncio.run(expocache._gzip(body))
    assert gzip.decompress(out) == body
    assert out.startswith(gzipparts.HEADER)  # the parts path, not gzip.compress
