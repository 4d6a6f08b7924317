"""Where a polling exporter's CPU goes: py-spy samples of a running `serve`, split into HTTP client, parse,
derive, render, the /metrics server and the event loop.

    py-spy record --pid PID --duration 30 --rate 100 --threads --format raw --output stacks.txt
    python bench/profile_split.py stacks.txt

Each sample is put in the stage of the innermost frame that names one: kvoffload_exporter/ingest (parse),
kvoffload_exporter/derive (derive), kvoffload_exporter/expose and the exposition cache (render), the polls'
client (sources/pollclient, sources/http1) and aiohttp / yarl / multidict under a target poll (HTTP client)
or otherwise (the /metrics server), asyncio and selectors
(event loop); the rest of kvoffload_exporter is "poll bookkeeping", everything else "other". py-spy without
--idle still records a thread waiting in `epoll_wait` or on an executor's queue as active: those samples
(IDLE) are counted apart and left out of the shares, so the shares are of the CPU the process used.
"""

from __future__ import annotations

import re
import sys
from collections import Counter

_FRAME = re.compile(r"\(([^()]*?):\d+\)$")
STAGES = (
    ("parse", ("kvoffload_exporter/ingest/",)),
    ("derive", ("kvoffload_exporter/derive/",)),
    (
        "render",
        ("kvoffload_exporter/expose/", "kvoffload_exporter/server/expocache", "kvoffload_exporter/server/gzipparts"),
    ),
)
HTTP = ("aiohttp/", "yarl/", "multidict/", "/http/")
POLL_CLIENT = ("kvoffload_exporter/sources/pollclient", "kvoffload_exporter/sources/http1")
"""The polls' own HTTP client (keep-alive HTTP/1.1 on asyncio): counted as "HTTP client" like aiohttp's was."""
LOOP = ("asyncio/", "selectors.py", "uvloop")
POLL = ("kvoffload_exporter/server/targetpoller", "kvoffload_exporter/sources/", "kvoffload_exporter/server/scheduler")


IDLE = (
    "EpollSelector.select (selectors.py",  # the loop waiting in epoll_wait
    "_worker (concurrent/futures/thread.py:81)",  # an executor thread waiting on its queue
)
"""Innermost frames that are waits, not CPU: py-spy reports a thread blocked there as active (at 1,000
targets these samples plus the busy ones came to twice the CPU time the process used; the busy ones alone
matched it within 5 %)."""


def stage(frames: list[str]) -> str:
    if frames and any(frames[-1].strip().startswith(k) for k in IDLE):
        return "idle waits (not CPU)"
    paths = [m.group(1) if (m := _FRAME.search(f.strip())) else f for f in frames]
    serving = any("aiohttp/web" in p for p in paths)  # the exporter's own /metrics (aiohttp.web)
    client = any(any(k in p for k in (*HTTP, *POLL_CLIENT)) and "aiohttp/web" not in p for p in paths)
    polling = client or any(any(p in path for p in POLL) for path in paths)
    for path in reversed(paths):  # innermost first
        for name, keys in STAGES:
            if any(k in path for k in keys):
                return name
        if any(k in path for k in HTTP):
            return "/metrics server" if "aiohttp/web" in path or not polling else "HTTP client"
        if any(k in path for k in POLL_CLIENT):
            return "HTTP client"
        if "kvoffload_exporter/" in path:
            return "poll bookkeeping"
        if any(k in path for k in LOOP):
            return "/metrics server" if serving else "HTTP client" if client else "event loop"
    return "other"


def split(lines: list[str]) -> Counter[str]:
    out: Counter[str] = Counter()
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if stack and count.isdigit():
            out[stage(stack.split(";"))] += int(count)
    return out


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as f:
        counts = split(f.readlines())
    idle = counts.pop("idle waits (not CPU)", 0)
    total = sum(counts.values()) or 1
    print("| stage | share of the exporter's CPU samples |")
    print("|---|---|")
    for name, k in counts.most_common():
        print(f"| {name} | {100 * k / total:.1f} % ({k}) |")
    print(f"| (idle waits left out) | ({idle}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
