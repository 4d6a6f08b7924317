"""A dependency-free PNG strip/box plot of canary TTFT per path (zlib + struct, 5×7 bitmap font).

One row per path: every sample as a dot (spread vertically so ties stay visible), the p25–p75 box
and a thick median bar, on a shared millisecond axis. Pure: returns the PNG bytes.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Mapping, Sequence

from kvoffload_exporter.canary.cycle.stats import quantile

_FONT: dict[str, tuple[int, ...]] = {
    "0": (0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E),
    "1": (0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E),
    "2": (0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F),
    "3": (0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E),
    "4": (0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02),
    "5": (0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E),
    "6": (0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E),
    "7": (0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08),
    "8": (0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E),
    "9": (0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C),
    "a": (0, 0, 0x0E, 0x01, 0x0F, 0x11, 0x0F),
    "b": (0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1E),
    "c": (0, 0, 0x0E, 0x10, 0x10, 0x11, 0x0E),
    "d": (0x01, 0x01, 0x0D, 0x13, 0x11, 0x11, 0x0F),
    "e": (0, 0, 0x0E, 0x11, 0x1F, 0x10, 0x0E),
    "f": (0x06, 0x09, 0x08, 0x1C, 0x08, 0x08, 0x08),
    "g": (0, 0x0F, 0x11, 0x11, 0x0F, 0x01, 0x0E),
    "h": (0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11),
    "i": (0x04, 0, 0x0C, 0x04, 0x04, 0x04, 0x0E),
    "j": (0x02, 0, 0x06, 0x02, 0x02, 0x12, 0x0C),
    "k": (0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12),
    "l": (0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E),
    "m": (0, 0, 0x1A, 0x15, 0x15, 0x11, 0x11),
    "n": (0, 0, 0x16, 0x19, 0x11, 0x11, 0x11),
    "o": (0, 0, 0x0E, 0x11, 0x11, 0x11, 0x0E),
    "p": (0, 0, 0x1E, 0x11, 0x1E, 0x10, 0x10),
    "q": (0, 0, 0x0D, 0x13, 0x0F, 0x01, 0x01),
    "r": (0, 0, 0x16, 0x19, 0x10, 0x10, 0x10),
    "s": (0, 0, 0x0E, 0x10, 0x0E, 0x01, 0x1E),
    "t": (0x08, 0x08, 0x1C, 0x08, 0x08, 0x09, 0x06),
    "u": (0, 0, 0x11, 0x11, 0x11, 0x13, 0x0D),
    "v": (0, 0, 0x11, 0x11, 0x11, 0x0A, 0x04),
    "w": (0, 0, 0x11, 0x11, 0x15, 0x15, 0x0A),
    "x": (0, 0, 0x11, 0x0A, 0x04, 0x0A, 0x11),
    "y": (0, 0, 0x11, 0x11, 0x0F, 0x01, 0x0E),
    "z": (0, 0, 0x1F, 0x02, 0x04, 0x08, 0x1F),
    " ": (0,) * 7,
    ".": (0, 0, 0, 0, 0, 0x0C, 0x0C),
    "-": (0, 0, 0, 0x1F, 0, 0, 0),
    "_": (0, 0, 0, 0, 0, 0, 0x1F),
    "+": (0, 0x04, 0x04, 0x1F, 0x04, 0x04, 0),
    ":": (0, 0x0C, 0x0C, 0, 0x0C, 0x0C, 0),
    "(": (0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02),
    ")": (0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08),
    "=": (0, 0, 0x1F, 0, 0x1F, 0, 0),
    "/": (0, 0x01, 0x02, 0x04, 0x08, 0x10, 0),
    ",": (0, 0, 0, 0, 0x0C, 0x04, 0x08),
    "%": (0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03),
    "[": (0x0E, 0x08, 0x08, 0x08, 0x08, 0x08, 0x0E),
    "]": (0x0E, 0x02, 0x02, 0x02, 0x02, 0x02, 0x0E),
}
_PALETTE = {
    "cold": (120, 120, 120),
    "gpu_hit": (44, 160, 44),
    "offload_hit": (214, 39, 40),
    "recompute": (31, 119, 180),
    "control_target": (148, 103, 189),
}
_OTHER = (255, 127, 14)
RGB = tuple[int, int, int]


class Canvas:
    def __init__(self, width: int, height: int, bg: RGB = (255, 255, 255)):
        self.w, self.h = width, height
        self.px = bytearray(bytes(bg) * (width * height))

    def dot(self, x: int, y: int, c: RGB) -> None:
        if 0 <= x < self.w and 0 <= y < self.h:
            i = 3 * (y * self.w + x)
            self.px[i : i + 3] = bytes(c)

    def rect(self, x0: int, y0: int, x1: int, y1: int, c: RGB, fill: bool = True) -> None:
        for y in range(min(y0, y1), max(y0, y1) + 1):
            for x in range(min(x0, x1), max(x0, x1) + 1):
                if fill or y in (y0, y1) or x in (x0, x1):
                    self.dot(x, y, c)

    def text(self, x: int, y: int, s: str, c: RGB = (0, 0, 0)) -> None:
        for ch in s.lower():
            rows = _FONT.get(ch, _FONT["-"])
            for r, bits in enumerate(rows):
                for col in range(5):
                    if bits & (0x10 >> col):
                        self.dot(x + col, y + r, c)
            x += 6

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + bytes(self.px[3 * y * self.w : 3 * (y + 1) * self.w]) for y in range(self.h))

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

        ihdr = struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
        return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def _nice_step(span: float, ticks: int = 6) -> float:
    raw = span / ticks
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    for m in (1, 2, 2.5, 5, 10):
        if m * mag >= raw:
            return m * mag
    return 10 * mag


SWEEP_H = 230


def _line(c: Canvas, x0: int, y0: int, x1: int, y1: int, color: RGB) -> None:
    steps = max(abs(x1 - x0), abs(y1 - y0), 1)
    for i in range(steps + 1):
        x, y = x0 + (x1 - x0) * i // steps, y0 + (y1 - y0) * i // steps
        c.rect(x, y, x + 1, y + 1, color)


def sweep_panel(c: Canvas, y0: int, entries: Sequence[Mapping[str, object]], left: int = 128, right: int = 70) -> None:
    """Median TTFT vs concurrency (levels evenly spaced), offload red, its control blue, p90 as a tick."""
    pts = [e for e in entries if e.get("offload_median_seconds") is not None or e.get("control_median_seconds")]
    c.text(8, y0 + 4, "ttft vs concurrency: median (dot), p90 (tick), red offload, blue control", (90, 90, 90))
    if not pts:
        c.text(left, y0 + 40, "no load sweep samples", (150, 150, 150))
        return
    top, bottom, plot_w = y0 + 22, y0 + SWEEP_H - 34, c.w - left - right
    keys = ("offload_median_seconds", "control_median_seconds", "offload_p90_seconds", "control_p90_seconds")
    vals = [float(v) * 1000 for e in pts for k in keys if isinstance(v := e.get(k), int | float)]
    hi = max(vals) * 1.1 if vals else 1.0

    def ypos(ms: float) -> int:
        return bottom - round(ms / hi * (bottom - top))

    c.rect(left, bottom, left + plot_w, bottom, (0, 0, 0))
    c.rect(left, top, left, bottom, (0, 0, 0))
    c.text(8, top, f"{hi:.0f} ms")
    c.text(8, bottom - 7, "0 ms")
    xs = [left + round((i + 0.5) * plot_w / len(pts)) for i in range(len(pts))]
    for x, e in zip(xs, pts):
        label = f"c={e['concurrency']}"
        c.text(x - 3 * len(label), bottom + 8, label)
    for med, p90, color in (
        ("offload_median_seconds", "offload_p90_seconds", _PALETTE["offload_hit"]),
        ("control_median_seconds", "control_p90_seconds", _PALETTE["recompute"]),
    ):
        prev: tuple[int, int] | None = None
        for x, e in zip(xs, pts):
            m, q = e.get(med), e.get(p90)
            if not isinstance(m, int | float):
                prev = None
                continue
            y = ypos(float(m) * 1000)
            c.rect(x - 2, y - 2, x + 2, y + 2, color)
            if isinstance(q, int | float):
                c.rect(x - 5, ypos(float(q) * 1000), x + 5, ypos(float(q) * 1000), color)
            if prev:
                _line(c, prev[0], prev[1], x, y, color)
            prev = (x, y)


def ttft_plot(
    samples: Mapping[str, Sequence[float]],
    title: str = "",
    width: int = 760,
    sweep: Sequence[Mapping[str, object]] | None = None,
) -> bytes:
    """`samples`: path → TTFT seconds. Paths without samples get an empty, labelled row. With `sweep`
    (the `load_sweep` entries) a TTFT-vs-concurrency panel is added below."""
    rows = list(samples)
    row_h, top, bottom, left, right = 44, 34, 40, 128, 70
    c = Canvas(width, top + row_h * max(1, len(rows)) + bottom + (SWEEP_H if sweep else 0))
    if sweep:
        sweep_panel(c, top + row_h * max(1, len(rows)) + bottom, sweep, left, right)
    c.text(8, 8, title[: (width - 16) // 6])
    c.text(8, 20, "client ttft to the first token, ms (box p25-p75, bar median)", (90, 90, 90))
    values = [v * 1000 for xs in samples.values() for v in xs]
    hi = max(values) * 1.08 if values else 1.0
    lo = 0.0
    plot_w = width - left - right
    step = _nice_step(hi - lo)

    def xpos(ms: float) -> int:
        return left + round((ms - lo) / (hi - lo) * plot_w) if hi > lo else left

    axis_y = top + row_h * max(1, len(rows)) + 4
    c.rect(left, axis_y, left + plot_w, axis_y, (0, 0, 0))
    t = 0.0
    while t <= hi + 1e-9:
        x = xpos(t)
        c.rect(x, axis_y, x, axis_y + 4, (0, 0, 0))
        for y in range(top, axis_y, 3):
            c.dot(x, y, (215, 215, 215))
        label = f"{t:g}"
        c.text(x - 3 * len(label), axis_y + 8, label)
        t += step
    for i, path in enumerate(rows):
        xs = [v * 1000 for v in samples[path]]
        y0 = top + i * row_h
        mid = y0 + row_h // 2
        color = _PALETTE.get(path, _OTHER)
        c.text(8, mid - 3, path[:20], color)
        if not xs:
            c.text(left + 4, mid - 3, "no samples", (150, 150, 150))
            continue
        q1, q2, q3 = quantile(xs, 0.25), quantile(xs, 0.5), quantile(xs, 0.75)
        c.rect(xpos(q1), mid - 10, xpos(q3), mid + 10, color, fill=False)
        c.rect(xpos(q2) - 1, mid - 13, xpos(q2) + 1, mid + 13, color)
        for k, v in enumerate(xs):
            dy = ((k * 7919) % 17) - 8  # deterministic spread: identical plots for identical data
            c.rect(xpos(v) - 1, mid + dy - 1, xpos(v) + 1, mid + dy + 1, color)
        c.text(left + plot_w + 6, mid - 3, f"n={len(xs)}")
    return c.png()
