"""Fast Prometheus text-format reader that keeps only the families it is asked for.

prometheus_client's parser handles every family and costs ~8 ms on a real vLLM body; a poller only
needs a few dozen families, so lines are filtered with one C-level `str.startswith(tuple)` before any
parsing. Names are canonicalised: `vllm_` (OpenMetrics-escaped) becomes `vllm:`, and a trailing
`_total` is dropped so names with or without it match.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
import re

Labels = tuple[tuple[str, str], ...]


class ParseError(ValueError):
    """The body is not a Prometheus text exposition we can read."""


@dataclass(frozen=True)
class Sample:
    name: str  # canonical: vllm: prefix, `_total` removed
    suffix: str  # "", "bucket", "sum" or "count"
    labels: Labels
    value: float


_LABEL_RE = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


@lru_cache(maxsize=4096)
def parse_labels(text: str) -> Labels:
    """`a="1",b="x"` → (("a","1"),("b","x")). Cached: a target repeats the same label sets every poll."""
    out = []
    pos = 0
    n = len(text)
    while pos < n:
        m = _LABEL_RE.match(text, pos)
        if not m:
            if text[pos:].strip(" ,"):
                raise ParseError(f"bad label set {{{text}}}")
            break
        value = m.group(2)
        if "\\" in value:
            value = re.sub(r'\\[\\"n]', lambda e: _ESCAPES[e.group(0)], value)
        out.append((m.group(1), value))
        pos = m.end()
    return tuple(out)


def canonical(name: str) -> str:
    if name.startswith("vllm_"):
        name = "vllm:" + name[5:]
    return name[:-6] if name.endswith("_total") else name


def line_prefixes(families: tuple[str, ...]) -> tuple[str, ...]:
    """The line prefixes that select `families` (canonical `vllm:` names) in either spelling."""
    out: list[str] = []
    for fam in families:
        tail = fam[5:]
        out += [fam, "vllm_" + tail]
    return tuple(out)


def read(text: str, prefixes: tuple[str, ...], histograms: frozenset[str]) -> tuple[list[Sample], set[str]]:
    """Return the samples whose line starts with one of `prefixes` and the families named in TYPE lines.

    `histograms` lists canonical histogram family names so `_bucket/_sum/_count` map onto them.
    `_created` samples are dropped. Raises ParseError on a selected line that cannot be read.
    """
    samples: list[Sample] = []
    typed: set[str] = set()
    type_prefixes = tuple("# TYPE " + p for p in prefixes)
    for line in text.split("\n"):
        if not line.startswith(prefixes):
            if line.startswith(type_prefixes):
                parts = line.split()
                if len(parts) >= 3:
                    typed.add(canonical(parts[2]))
            continue
        brace = line.find("{")
        if brace >= 0:
            close = line.rfind("}")
            if close < brace:
                raise ParseError(f"unterminated label set: {line[:120]!r}")
            raw_name = line[:brace]
            labels = parse_labels(line[brace + 1:close])
            rest = line[close + 1:]
        else:
            raw_name, _, rest = line.partition(" ")
            labels = ()
        fields = rest.split()
        if not fields:
            raise ParseError(f"sample without value: {line[:120]!r}")
        try:
            value = float(fields[0])
        except ValueError:
            raise ParseError(f"bad sample value: {line[:120]!r}") from None
        name = canonical(raw_name.strip())
        if name.endswith("_created"):
            continue
        suffix = ""
        for sfx in ("_bucket", "_sum", "_count"):
            if name.endswith(sfx) and name[: -len(sfx)] in histograms:
                name, suffix = name[: -len(sfx)], sfx[1:]
                break
        samples.append(Sample(name, suffix, labels, value))
    return samples, typed
