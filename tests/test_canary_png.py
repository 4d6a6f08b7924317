"""The dependency-free TTFT plot is a valid PNG that shows every path's colour."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

from kvoffload_exporter.canary.check.png import _PALETTE, ttft_plot

ROOT = Path(__file__).resolve().parents[1]


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


SAMPLES = {"offload_hit": [0.05, 0.06, 0.0625], "cold": [0.04, 0.041], "control_target": [0.034]}
TITLE = "kvoffload check http://127.0.0.1:8000 offload_slower"
# sha256 of the decoded pixels (not of the file: zlib builds may compress the same pixels differently).
# Regenerate after an intended drawing change: print(hashlib.sha256(_decode(ttft_plot(SAMPLES, TITLE))[2]).hexdigest())
GOLDEN_PIXELS = "c850c8bd5f4adab64a1dcb824cef47937a53f3f528036e4129a500c61b69342c"

_SUBPROCESS = """
import json, sys
from kvoffload_exporter.canary.check.png import ttft_plot
samples, title = json.loads(sys.stdin.read())
sys.stdout.buffer.write(ttft_plot(samples, title))
"""


def _fresh_copy() -> dict[str, tuple[float, ...]]:
    """The same data as SAMPLES in new objects: other container types, floats computed anew."""
    return {k: tuple(float(repr(v)) for v in vs) for k, vs in json.loads(json.dumps(SAMPLES)).items()}


def test_identical_data_gives_identical_bytes() -> None:
    """Same data → same pixels as the checked-in golden, byte-identical across independent builds and
    processes with other hash seeds; different data → different bytes."""
    png = ttft_plot(SAMPLES, TITLE)
    assert hashlib.sha256(_decode(png)[2]).hexdigest() == GOLDEN_PIXELS
    assert ttft_plot(_fresh_copy(), str(TITLE)) == png
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        run = subprocess.run(
            [sys.executable, "-c", _SUBPROCESS],
            input=json.dumps([SAMPLES, TITLE]).encode(),
            capture_output=True,
            env=env,
            check=True,
        )
        assert run.stdout == png, seed
    other = {**SAMPLES, "offload_hit": [0.05, 0.06, 0.0626]}
    assert ttft_plot(other, TITLE) != png
    assert ttft_plot(SAMPLES, TITLE + "!") != png
