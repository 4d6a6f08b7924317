"""`inspect`: read saved /metrics dumps — one file: cumulative signals; two: the interval and its state."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any

from kvoffload_exporter.config.limits import Limits
from kvoffload_exporter.config.settings import Config
from kvoffload_exporter.derive.intervalreport import report
from kvoffload_exporter.derive.reasons import HINTS
from kvoffload_exporter.ingest.bodies import join_sources
from kvoffload_exporter.ingest.exposition import ParseError
from kvoffload_exporter.ingest.normalise import normalise
from kvoffload_exporter.ingest.snapshot import Snapshot
from kvoffload_exporter.saferead import FileRefused, read_regular

ORDER = 20


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "inspect",
        help="explain saved /metrics dumps (one file, or before and after)",
        description="One FILE: cumulative offload signals per engine (no state: one dump has no window). "
        "FILE FILE2 (before, after): the interval's deltas and evidence state.",
    )
    p.add_argument("file", help="a saved /metrics dump; - reads standard input")
    p.add_argument("file2", nargs="?", help="a later dump of the same server (one of the two may be -)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


MAX_FILE_BYTES = Config().max_body_bytes
"""The exporter's body cap: a dump larger than a poll would accept is refused, not read."""


class _TooLarge(Exception):
    """A file (or a part of a join) past what the cap has left: refused with the whole path's name."""


def _unusable(message: str) -> SystemExit:
    """A file `inspect` cannot use (missing, not a regular file, too large, not an exposition): one line on
    stderr and exit 2, as every command exits on a bad path or input (docs/operations: exit codes)."""
    print(message, file=sys.stderr)
    return SystemExit(2)


def _read(path: str, room: int = MAX_FILE_BYTES) -> bytes:
    """At most `room` + 1 bytes of a file or, for `-`, of standard input (`curl … | inspect -`).

    A file must be a regular one (kvoffload_exporter.saferead): a FIFO is refused at once instead of
    waiting for a writer, a device is never read; a pipe comes in as `-`."""
    if path == "-":
        return sys.stdin.buffer.read(room + 1)
    try:
        return read_regular(path, room)
    except FileRefused as e:
        if e.strerror:
            raise _unusable(f"kvoffload-exporter inspect: cannot read {path}: {e.strerror}") from None
        if "cap" in str(e):
            raise _TooLarge from None
        raise _unusable(f"kvoffload-exporter inspect: cannot read {path}: it {e} (use - for a pipe)") from None


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
    """Read one dump (or `a+b`) under the exporter's caps (file size, kvoffload_exporter.config.limits defaults)."""
    try:
        parts = _read_all(path)
    except _TooLarge:
        parts = []
    path = "standard input" if path == "-" else path
    if not parts or sum(map(len, parts)) + len(parts) - 1 > MAX_FILE_BYTES:
        raise _unusable(f"kvoffload-exporter inspect: {path} is larger than {MAX_FILE_BYTES} bytes")
    try:
        bodies = [p.decode("utf-8") for p in parts]
        text, origins = join_sources(bodies[0], bodies[1:])
    except UnicodeDecodeError:
        raise _unusable(f"kvoffload-exporter inspect: {path} is not UTF-8 text") from None
    try:
        snap = normalise(text, Limits(), origins=origins)
    except ParseError as e:
        raise _unusable(f"kvoffload-exporter inspect: {path}: {e} ({e.reason})") from None
    if not snap.families:
        raise _unusable(f"kvoffload-exporter inspect: {path} contains no vllm: metrics")
    return snap


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(v: Any) -> Any:
    """Every string in `v` with control characters written as escapes (`\\x1b`): a label value read
    from a dump is the target's text, and an ANSI sequence in it must not reach the terminal."""
    if isinstance(v, str):
        return _CONTROL.sub(lambda m: ascii(m.group())[1:-1], v)
    if isinstance(v, dict):
        return {_escape(k): _escape(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_escape(x) for x in v]
    return v


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
            out.append(_escape(f"{a.model_name}/{a.engine}"))
    return out


def _load_pair(first: str, second: str) -> tuple[Snapshot, Snapshot]:
    if first == second == "-":
        raise _unusable("kvoffload-exporter inspect: only one of the two files can be - (standard input)")
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


def _ttft_line(e: dict[str, Any]) -> str:  # Any: an engine row of derive/intervalreport's document
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
    doc = _escape(doc)  # text for a terminal: JSON escapes control characters itself
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
    if before is None:
        print("state: needs two dumps (inspect BEFORE AFTER); one dump has no window to judge")
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
