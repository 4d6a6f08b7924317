"""Wire formats the canary speaks, without any I/O: SSE event splitting, completion results, /v1/models.

Kept apart from client.py so the engine and tests can use them without importing aiohttp.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

ERRORS = ("http_429", "http_5xx", "http_4xx", "timeout", "connect", "stream_error", "protocol")
"""Closed set of request failure reasons (evidence and logs; never free text in labels)."""


class MetricsError(Exception):
    """`/metrics` could not be read (the client converts the source's ScrapeError into this)."""


@dataclass
class Completion:
    status: int | None = None
    ttft_event: float | None = None  # seconds to the first data: event
    ttft_token: float | None = None  # seconds to the first token-bearing event
    total: float | None = None
    usage: dict[str, Any] | None = None
    server_metrics: dict[str, Any] | None = None  # `metrics` of --enable-per-request-metrics
    events: int = 0
    error: str | None = None  # one of ERRORS
    detail: str = ""
    retry_after: float | None = None
    kv_transfer_params: Any = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def cached_tokens(self) -> int | None:
        """usage.prompt_tokens_details.cached_tokens; None when the server does not report it
        (needs --enable-prompt-tokens-details; omitted at 0 by vLLM <= 0.23)."""
        if not self.usage:
            return None
        details = self.usage.get("prompt_tokens_details")
        if not isinstance(details, dict) or details.get("cached_tokens") is None:
            return None
        return int(details["cached_tokens"])

    @property
    def tokens_spent(self) -> int:
        if not self.usage:
            return 0
        return int(self.usage.get("prompt_tokens") or 0) + int(self.usage.get("completion_tokens") or 0)


class SseReader:
    """Incremental `data:` event splitter (comments such as `: keep-alive` and blank lines skipped)."""

    def __init__(self) -> None:
        self._buf = b""
        self.done = False

    def feed(self, chunk: bytes) -> list[Any]:
        self._buf += chunk
        events: list[Any] = []
        while b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            line = line.rstrip(b"\r")
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.done = True
                continue
            events.append(json.loads(payload))
        return events


def has_token(event: Any) -> bool:
    choices = event.get("choices") if isinstance(event, dict) else None
    if not choices or not isinstance(choices[0], dict):
        return False
    c = choices[0]
    return bool(c.get("text")) or bool(c.get("token_ids"))


@dataclass
class Models:
    ids: list[str] = field(default_factory=list)
    max_model_len: dict[str, int] = field(default_factory=dict)


def parse_models(data: Any) -> Models:
    out = Models()
    items = data.get("data") if isinstance(data, dict) else None
    for m in items or []:
        if isinstance(m, dict) and isinstance(m.get("id"), str):
            out.ids.append(m["id"])
            if isinstance(m.get("max_model_len"), int):
                out.max_model_len[m["id"]] = m["max_model_len"]
    return out
