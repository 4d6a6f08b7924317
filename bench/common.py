"""What the benchmarks share: the real capture they replay as advancing bodies, and a free local port."""

from __future__ import annotations

import re
import socket
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

CAPTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "h200-0.6b" / "A_12_final.prom"
"""A real vLLM 0.26.0 body from the H200 runs (67 KB, 529 samples)."""


def prometheus_client_parse(text: str) -> int:
    """The baseline both benchmarks time: prometheus_client's parser over a whole body (its sample count)."""
    return sum(len(f.samples) for f in text_string_to_metric_families(text))


_ADVANCING = re.compile(r"^(vllm:\S*?(?:_total|_count|_sum|_bucket)(?:\{[^}]*\})?) (\S+)$")


class AdvancingBodies:
    """The capture split once into fixed text and cumulative values; body n scales every cumulative value
    by (1 + n/per), so histograms stay cumulative and every poll sees traffic, as from a live server.
    A value the capture writes as a whole number (a count: requests, tokens, bucket counts; 386 of its
    396 cumulative values) stays one, rounded, as vLLM writes it (`184.0`); the others (`_sum`s of
    seconds) advance as fractions."""

    def __init__(self, text: str, per: float) -> None:
        self.per = per
        self.parts: list[str] = []
        self.values: list[float] = []
        self.whole: list[bool] = []
        fixed: list[str] = []
        for line in text.split("\n"):
            m = _ADVANCING.match(line)
            if m is None or m.group(2) in ("+Inf", "NaN"):
                fixed.append(line)
                continue
            self.parts.append("\n".join([*fixed, m.group(1) + " "]))
            self.values.append(float(m.group(2)))
            self.whole.append(float(m.group(2)).is_integer())
            fixed = [""]
        self.tail = "\n".join(fixed)

    def body(self, n: int) -> str:
        f = 1.0 + n / self.per
        vals = (repr(float(round(v * f))) if w else repr(v * f) for v, w in zip(self.values, self.whole, strict=True))
        return "".join(p + v for p, v in zip(self.parts, vals, strict=True)) + self.tail


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
