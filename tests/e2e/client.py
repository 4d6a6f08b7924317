"""Stdlib HTTP client for the e2e tests: GET endpoints, streamed completions, and counter reads from /metrics.

The tests compare the exporter against the engine's own counters, so the counter reader is the tests' own
(support.prom, prometheus_client's parser), deliberately not kvoffload_exporter.ingest.exposition. Streams are split by the
project's one SSE parser (kvoffload_exporter.canary.wire.protocol.SseReader).
"""

from __future__ import annotations

import json
import random
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from support.prom import samples, total

from kvoffload_exporter.canary.wire.protocol import SseReader

__all__ = ["samples", "total"]

MODEL = "tiny"
FIRST_WORD_ID, VOCAB = 4, 32000  # token ids 0-3 are special tokens


def get(base: str, path: str, timeout: float = 30) -> tuple[int, str]:
    with urllib.request.urlopen(base + path, timeout=timeout) as r:
        return r.status, r.read().decode()


def get_json(base: str, path: str) -> Any:
    return json.loads(get(base, path)[1])


def metrics(base: str) -> str:
    return get(base, "/metrics")[1]


def prompt_ids(n: int, rng: random.Random) -> list[int]:
    """n random token ids; with 32k-way choices two prompts never share a first block by accident."""
    return [rng.randrange(FIRST_WORD_ID, VOCAB) for _ in range(n)]


@dataclass
class Completion:
    status: int
    chunks: int = 0
    text: str = ""
    usage: dict = field(default_factory=dict)

    @property
    def cached_tokens(self) -> int:
        return (self.usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0


def complete(
    base: str, prompt: list[int] | str, max_tokens: int = 1, extra: dict | None = None, timeout: float = 120
) -> Completion:
    """One streamed /v1/completions request, read to the end; returns the final usage."""
    body = {
        "model": MODEL,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        **(extra or {}),
    }
    req = urllib.request.Request(
        base + "/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        out = Completion(status=r.status)
        reader = SseReader()
        for raw in r:  # one line at a time; the project's one SSE parser does the framing
            for chunk in reader.feed(raw):
                if not isinstance(chunk, dict):
                    continue
                out.chunks += 1
                for choice in chunk.get("choices") or ():
                    out.text += choice.get("text") or ""
                if chunk.get("usage"):
                    out.usage = chunk["usage"]
            if reader.done:
                break
    return out


FLUSH_PROMPT = [FIRST_WORD_ID] * 4  # shorter than a 128-token block: never stores anything itself


def settle(base: str, pause: float = 0.5) -> None:
    """Let stores of the previous request surface in /metrics: offload completions are reported with the
    NEXT engine step, so run a tiny 4-token request, then give the API server a moment to fold them in."""
    complete(base, FLUSH_PROMPT, max_tokens=1)
    time.sleep(pause)


def families(text: str) -> set[str]:
    """Names declared by `# TYPE` lines."""
    return {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}


def has_help_and_type(text: str, family: str) -> bool:
    return any(line.startswith(f"# HELP {family} ") for line in text.splitlines()) and family in families(text)
