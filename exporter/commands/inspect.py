"""`inspect`: read saved /metrics dumps — one file: cumulative signals; two: the interval and its state."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from exporter.capacity import tier_bytes
from exporter.config import Config
from exporter.derive import EngineDerived, interval
from exporter.exposition import ParseError, join_bodies
from exporter.limits import Limits
from exporter.model import Signal, Snapshot
from exporter.normalise import normalise
from exporter.reasons import HINTS, explain

ORDER = 20

_FIELDS = (
    (Signal.OFFLOAD_LOAD_BYTES, "load B"),
    (Signal.OFFLOAD_STORE_BYTES, "store B"),
    (Signal.OFFLOAD_LOAD_SECONDS, None),
    (Signal.OFFLOAD_STORE_SECONDS, None),
    (Signal.GPU_PREFIX_QUERIES, None),
    (Signal.GPU_PREFIX_HITS, "GPU hit tok"),
    (Signal.EXTERNAL_PREFIX_QUERIES, None),
    (Signal.EXTERNAL_PREFIX_HITS, "ext hit tok"),
    (Signal.PROMPT_TOKENS, None),
)

_CACHE_KEYS = (
    "block_size",
    "num_gpu_blocks",
    "enable_prefix_caching",
    "kv_offloading_size",
    "kv_offloading_backend",
    "kv_cache_size_tokens",
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "inspect",
        help="explain saved /metrics dumps (one file, or before and after)",
        description="One FILE: cumulative offload signals per engine. FILE FILE2 "
        "(before, after): the interval's deltas and evidence state.",
    )
    p.add_argument("file", help="a saved /metrics dump; - reads standard input")
    p.add_argument("file2", nargs="?", help="a later dump of the same server (one of the two may be -)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


MAX_FILE_BYTES = Config().max_body_bytes
"""The exporter's body cap: a dump larger than a poll would accept is refused, not read."""


def _read(path: str, room: int = MAX_FILE_BYTES) -> bytes:
    """At most `room` + 1 bytes of a file or, for `-`, of standard input (`curl … | inspect -`)."""
    if path == "-":
        return sys.stdin.buffer.read(room + 1)
    try:
        with open(path, "rb") as f:
            return f.read(room + 1)
    except OSError as e:
        raise SystemExit(f"kvoffload-exporter inspect: cannot read {path}: {e.strerror}") from None


def _read_all(path: str) -> list[bytes]:
    """One dump, or several joined with `+` (vLLM /metrics plus a backend's own endpoint such as KVBM's
    or the LMCache MP server's, scraped at the same moment): read as one exposition, under one cap."""
    if "+" not in path or path == "-" or os.path.exists(path):
        return [_read(path)]
    parts: list[bytes] = []
    room = MAX_FILE_BYTES
    for p in path.split("+"):  # each part reads only what the cap has left: 40 parts cost one cap
        parts.append(_read(p, max(room, 0)))
        room -= len(parts[-1]) + 1
    return parts


def _load(path: str) -> Snapshot:
    """Read one dump (or `a+b`) under the exporter's caps (file size, exporter.limits defaults)."""
    parts = _read_all(path)
    path = "standard input" if path == "-" else path
    if sum(map(len, parts)) + len(parts) - 1 > MAX_FILE_BYTES:
        raise SystemExit(f"kvoffload-exporter inspect: {path} is larger than {MAX_FILE_BYTES} bytes")
    try:
        text = join_bodies([p.decode("utf-8") for p in parts])
    except UnicodeDecodeError:
        raise SystemExit(f"kvoffload-exporter inspect: {path} is not UTF-8 text") from None
    try:
        snap = normalise(text, Limits())
    except ParseError as e:
        raise SystemExit(f"kvoffload-exporter inspect: {path}: {e} ({e.reason})") from None
    if not snap.families:
        raise SystemExit(f"kvoffload-exporter inspect: {path} contains no vllm: metrics")
    return snap


def _finite(v: float | None) -> float | None:
    """As is, or None where undefined or not finite: `--json` must be JSON (no NaN/Infinity)."""
    return None if v is None or v - v != 0.0 else v


def _r(v: float | None) -> float | None:
    """Rounded, and None where undefined or not finite: `--json` must be JSON (no NaN/Infinity)."""
    return None if v is None or v - v != 0.0 else round(v, 6)


def report(before: Snapshot | None, after: Snapshot) -> dict[str, Any]:
    """The `--json` document (also used by tests and `check`)."""
    engines = []
    derived = interval(before, after)
    for e in after.engines:
        d: EngineDerived = derived[e.key]
        row: dict[str, Any] = {"model_name": e.model_name, "engine": e.engine}
        for k, _ in _FIELDS:
            row[k] = _finite(d.deltas.get(k))
        row["prompt_tokens_by_source"] = {k: _finite(v) for k, v in d.by_source.items()}
        row["state"] = d.state
        row["state_reason"] = explain(d, e, after.families, tier_bytes=tier_bytes(e, None))  # None: nothing to explain
        row["load_store_ratio"] = _r(d.load_store_ratio)
        row["load_bandwidth_bytes_per_second"] = _r(d.load_bandwidth)
        row["store_bandwidth_bytes_per_second"] = _r(d.store_bandwidth)
        row["gpu_prefix_hit_ratio"] = _r(d.gpu_hit_ratio)
        row["external_prefix_hit_ratio"] = _r(d.external_hit_ratio)
        row["ttft_seconds"] = {str(q): _r(v) for q, v in d.ttft_quantiles.items()}
        row["ttft_count"] = _finite(d.ttft_count)  # the requests the quantiles come from
        row["cache_config"] = {k: v for k, v in e.cache_config.items() if k in _CACHE_KEYS}
        row["load_store_ratio_unit"] = d.ratio_unit
        row["evidence"] = _evidence(d)
        engines.append(row)
    return {
        "mode": "interval" if before is not None else "cumulative",
        "backends": list(after.backends),
        "sources": [{"signal": s, "resolved_name": n, "unit": u} for s, n, u in after.sources],
        "generation": after.generation,
        "multiprocess": after.multiprocess,
        "engines": engines,
        "second_endpoint_missing": second_endpoint_missing(after, engines),
    }


def second_endpoint_missing(after: Snapshot, engines: list[dict[str, Any]]) -> str | None:
    """Why a file shows prefix hits from outside but no offload counters: the backend keeps them on a second
    endpoint (Dynamo KVBM, the LMCache MP server) whose dump was not joined with `+`. None otherwise."""
    if {"stored", "loaded"} & {s for s, _, _ in after.sources}:
        return None
    lmcache = "lmcache_mp" in after.backends or any(
        e["cache_config"].get("kv_offloading_backend") == "lmcache" for e in engines
    )
    outside = any((e.get("external_prefix_hits") or 0) > 0 for e in engines)
    join = "join its dump with +: inspect before.prom+second-before.prom after.prom+second-after.prom"
    if lmcache:
        return f"the LMCache MP server keeps the stored/loaded counters on its own /metrics, not in this file; {join}"
    if outside:
        return (
            "external prefix hits but no offload counters in this file: if the connector keeps them on a second "
            f"endpoint (Dynamo KVBM's metrics port, the LMCache MP server), {join}"
        )
    return None


def _evidence(d: EngineDerived) -> list[dict[str, Any]]:
    """Evidence series in the one schema: deltas for cumulative signals, last values for the others."""
    rows = [(k, v, True) for k, v in d.evidence.items()] + [(k, v, False) for k, v in d.evidence_gauges.items()]
    return [
        {
            "signal": k.signal,
            "unit": k.unit,
            "tier": k.tier,
            "connector": k.connector,
            "reason": k.reason,
            "detail": k.detail,
            "delta" if delta else "value": _finite(v),
        }
        for k, v, delta in sorted(rows, key=lambda r: tuple(r[0]))
    ]


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.0f}" if v == int(v) else f"{v:.4g}"
    return str(v)


def went_backwards(before: Snapshot, after: Snapshot) -> list[str]:
    """`model/engine` of every engine with a counter (or the TTFT count) lower in `after` than in `before`.

    The interval still counts it as a reset (that is what a restart looks like), but two files given in
    the wrong order look exactly the same, so the operator is told instead of silently shown a reset.
    """
    out = []
    for a in after.engines:
        b = before.engine(a.key)
        if b is None:
            continue
        down = any(v < b.counters[k] for k, v in a.counters.items() if k in b.counters)
        down = down or any(
            v < b.prompt_tokens_by_source[k]
            for k, v in a.prompt_tokens_by_source.items()
            if k in b.prompt_tokens_by_source
        )
        if down or (a.ttft is not None and b.ttft is not None and a.ttft.count < b.ttft.count):
            out.append(f"{a.model_name}/{a.engine}")
    return out


def _load_pair(first: str, second: str) -> tuple[Snapshot, Snapshot]:
    if first == second == "-":
        raise SystemExit("kvoffload-exporter inspect: only one of the two files can be - (standard input)")
    before, after = _load(first), _load(second)
    if before.generation != after.generation:
        print(f"note: offload metric generation changed: {before.generation} -> {after.generation}", file=sys.stderr)
    back = went_backwards(before, after)
    if back:
        print(
            f"warning: counters went backwards between the two files for {', '.join(back)} "
            "(engine restart or files in the wrong order?); counted as a reset",
            file=sys.stderr,
        )
    return before, after


def _ttft_line(e: dict[str, Any]) -> str:
    """`TTFT m/0: p50 41.0 ms, p90 55.0 ms (n=37)`: a quantile means little without its sample count."""
    qs = ", ".join(f"p{float(q) * 100:g} {v * 1000:.1f} ms" for q, v in e["ttft_seconds"].items() if v is not None)
    n = e.get("ttft_count")
    return f"TTFT {e['model_name']}/{e['engine']}: {qs} (n={'?' if n is None else f'{n:.0f}'})"


def run(args: argparse.Namespace) -> int:
    if args.file2:
        before, after = _load_pair(args.file, args.file2)
    else:
        before, after = None, _load(args.file)
    doc = report(before, after)
    if args.json:
        json.dump(doc, sys.stdout, indent=2, sort_keys=True, allow_nan=False)
        print()
        return 0
    mode = "interval (after - before)" if before else "cumulative since engine start"
    print(
        f"{mode}; offload metric generation: {doc['generation']}"
        + (" (multiprocess exposition)" if doc["multiprocess"] else "")
    )
    cols = [
        "model_name",
        "engine",
        "state",
        "state_reason",
        "offload_load_bytes",
        "offload_store_bytes",
        "load_store_ratio",
        "gpu_prefix_hits",
        "external_prefix_hits",
        "gpu_prefix_hit_ratio",
        "external_prefix_hit_ratio",
    ]
    heads = [
        "model",
        "engine",
        "state",
        "reason",
        "load bytes",
        "store bytes",
        "load/store",
        "GPU hit tok",
        "ext hit tok",
        "GPU hit ratio",
        "ext hit ratio",
    ]
    rows = [[_fmt(e.get(c)) for c in cols] for e in doc["engines"]]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(heads)]
    print("  ".join(h.ljust(w) for h, w in zip(heads, widths)))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    if doc["second_endpoint_missing"]:
        print(f"missing second endpoint: {doc['second_endpoint_missing']}")
    for e in doc["engines"]:
        if e["state_reason"]:
            print(f"why {e['model_name']}/{e['engine']} {e['state']}: {e['state_reason']} - {HINTS[e['state_reason']]}")
    for e in doc["engines"]:
        moved = [
            f"{x['signal']} {_fmt(x['delta'])} {x['unit']}" + (f" ({x['tier']})" if x["tier"] else "")
            for x in e["evidence"]
            if x["signal"] in ("stored", "loaded", "dropped") and x.get("delta")
        ]
        if moved:
            print(f"evidence {e['model_name']}/{e['engine']} ({', '.join(doc['backends'])}): {'; '.join(moved)}")
        if e["ttft_seconds"]:
            print(_ttft_line(e))
    return 0
