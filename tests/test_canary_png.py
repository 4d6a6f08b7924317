"""The dependency-free TTFT plot is a valid PNG that shows every path's colour."""

from __future__ import annotations

import struct
import zlib

from exporter.canary.png import _PALETTE, ttft_plot


def _decode(png: bytes) -> tuple[int, int, bytes]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, size = 8, b"", (0, 0)
    while pos < len(png):
        (n,) = struct.unpack(">I", png[pos : pos + 4])
        kind, data = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + n]
        (crc,) = struct.unpack(">I", png[pos + 8 + n : pos + 12 + n])
        assert crc == zlib.crc32(kind + data)
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", data[:10])
            assert (depth, ctype) == (8, 2)
            size = (w, h)
        elif kind == b"IDAT":
            idat += data
        pos += 12 + n
    raw = zlib.decompress(idat)
    w, h = size
    assert len(raw) == h * (1 + 3 * w)
    pixels = b"".join(raw[y * (1 + 3 * w) + 1 : (y + 1) * (1 + 3 * w)] for y in range(h))
    return w, h, pixels


def _has(pixels: bytes, rgb: tuple[int, int, int]) -> bool:
    target = bytes(rgb)
    return any(pixels[i : i + 3] == target for i in range(0, len(pixels), 3))


def test_plot_is_a_valid_png_with_one_row_per_path() -> None:
    samples = {
        "cold": [0.041, 0.043],
        "gpu_hit": [0.034],
        "offload_hit": [0.062, 0.065, 0.07],
        "recompute": [],
        "control_target": [0.034, 0.036],
    }
    w, h, px = _decode(ttft_plot(samples, "kvoffload check test: offload_slower"))
    assert w == 760 and h == 34 + 44 * 5 + 40
    for path in ("cold", "gpu_hit", "offload_hit", "control_target", "recompute"):
        assert _has(px, _PALETTE[path]), path  # recompute: its label only


def test_plot_without_samples() -> None:
    w, h, _ = _decode(ttft_plot({}, ""))
    assert (w, h) == (760, 34 + 44 + 40)


def test_identical_data_gives_identical_bytes() -> None:
    s = {"offload_hit": [0.05, 0.06], "cold": [0.04]}
    assert ttft_plot(s, "x") == ttft_plot(dict(s), "x")
