"""Several bodies read as one: vLLM's /metrics and a target's extra endpoints (a backend's own endpoint such as
KVBM's or the LMCache MP server's), with the source each family came from.

Why the source: a restart of one endpoint must reset only its own counters (derive.resets), so the evidence
of a joined read says which body declared each family. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from kvoffload_exporter.ingest.backends.resolve import FAMILIES as READ
from kvoffload_exporter.ingest.families import canonical


def join_bodies(bodies: Sequence[str]) -> str:
    """Expositions scraped at one moment (vLLM's /metrics plus a backend's own endpoint such as KVBM's
    or the LMCache MP server's) read as one: `inspect a+b` and `serve`'s extra_metrics_urls join them
    alike, so a dump pair and a live target resolve the same backends."""
    return "\n".join(bodies)


_HEAD = re.compile(r"^(?:# TYPE )?([A-Za-z_:][A-Za-z0-9_:]*)", re.M)
_PARTS = ("_bucket", "_sum", "_count", "_created", "_gsum", "_gcount")


def body_families(body: str, wanted: frozenset[str] = READ) -> frozenset[str]:
    """The canonical family names one body declares (TYPE lines and sample names, histogram parts
    folded onto their family) among `wanted` (the families the backend tables read: a hostile body
    inventing names holds no memory here): which families an extra endpoint contributed to a joined read."""
    out: set[str] = set()
    for name in _HEAD.findall(body):
        fam = canonical(name)
        if fam in wanted:
            out.add(fam)
        for part in _PARTS:
            if name.endswith(part) and (fam := canonical(name[: -len(part)])) in wanted:
                out.add(fam)
    return frozenset(out)


def join_sources(vllm: str, extras: Sequence[str | None]) -> tuple[str, dict[str, int]]:
    """vLLM's body and its target's extra endpoints' bodies (None: that fetch failed) read as one, with
    the source of each family an extra body declared (its position in the config, from 1). A family both
    declare stays vLLM's: a restart of the extra endpoint never resets what vLLM counts."""
    own = body_families(vllm) if any(b is not None for b in extras) else frozenset()
    origins: dict[str, int] = {}
    for i, body in enumerate(extras, start=1):
        if body is not None:
            for fam in body_families(body) - own:
                origins.setdefault(fam, i)
    return join_bodies([vllm, *(b for b in extras if b is not None)]), origins


__all__ = ["body_families", "join_bodies", "join_sources"]
