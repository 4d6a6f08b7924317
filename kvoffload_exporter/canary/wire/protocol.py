"""Wire formats the canary speaks, without any I/O: SSE events, folding a stream into a completion, /v1/models.

Kept apart from client.py so the engine and tests can use them without importing aiohttp. Every event
goes through validate.Event (typed, bounded, finite), so a hostile stream ends as a closed error
reason of the completion, never as an exception in the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvoffload_exporter.canary.types import ErrorReason
from kvoffload_exporter.canary.wire import validate

ERRORS: tuple[str, ...] = tuple(
    r.value
    for r in (
        ErrorReason.HTTP_429,
        ErrorReason.HTTP_5XX,
        ErrorReason.HTTP_4XX,
        ErrorReason.TIMEOUT,
        ErrorReason.CONNECT,
        ErrorReason.STREAM_ERROR,
        ErrorReason.PROTOCOL,
        ErrorReason.INVALID,
        ErrorReason.TOO_LARGE,
        ErrorReason.TOO_DEEP,
        ErrorReason.NON_FINITE,
    )
)
"""Closed set of request failure reasons (evidence and logs; never free text in labels)."""


class MetricsError(Exception):
    """`/metrics` could not be read (the client converts the source's ScrapeError into this)."""


@dataclass
class Completion:
    status: int | None = None
    ttft_event: float | None = None  # seconds to the first data: event
    ttft_token: float | None = None  # seconds to the first token-bearing event
    total: float | None = None
    usage: dict[str, object] | None = None  # validate.Usage.as_dict(): only the fields read, checked
    server_metrics: dict[str, object] | None = None  # `metrics` of --enable-per-request-metrics
    events: int = 0
    error: str | None = None  # one of ERRORS
    detail: str = ""
    retry_after: float | None = None
    kv_transfer_params: object = None
    token_ids: list[int] = field(default_factory=list)  # generated ids (return_token_ids), at most MAX_OUTPUT_IDS

    @property
    def ok(self) -> bool:
        return self.error is None

    def _usage(self) -> validate.Usage | None:
        try:
            return validate.Usage.parse(self.usage)
        except validate.Invalid:  # only a hand-built Completion can get here: the stream validated it
            return None

    @property
    def cached_tokens(self) -> int | None:
        """usage.prompt_tokens_details.cached_tokens; None when the server does not report it
        (needs --enable-prompt-tokens-details; omitted at 0 by vLLM <= 0.23)."""
        u = self._usage()
        return u.cached_tokens if u else None

    @property
    def tokens_spent(self) -> int:
        """Prompt + generated tokens the server reports: never negative (validate.count)."""
        u = self._usage()
        return u.prompt_tokens + u.completion_tokens if u else 0


MAX_LINE_BYTES = 8 * 1024 * 1024
"""Longest SSE line accepted: a `prompt_token_ids` echo of a 128k-token prompt is about 1 MB."""
MAX_RESPONSE_BYTES = 32 * 1024 * 1024
"""Most bytes read from one streamed completion (max_tokens 1: a few events, one of them long)."""


class SseTooLarge(ValueError):
    """A line or the whole stream went over its cap; reading stops at once (error `too_large`)."""


class SseReader:
    """Incremental `data:` event splitter (comments such as `: keep-alive` and blank lines skipped).

    THE SSE parser of the project (canary client, simulator sender, tests). Linear in the stream size:
    each byte is scanned for a newline once and copied at most twice (into the pending partial line,
    and out of it when the line completes), whatever the chunking; a line over `max_line` bytes or a
    stream over `max_response` bytes raises SseTooLarge as soon as the cap is crossed.
    """

    def __init__(self, max_line: int = MAX_LINE_BYTES, max_response: int = MAX_RESPONSE_BYTES) -> None:
        self.max_line = max_line
        self.max_response = max_response
        self.received = 0
        self.done = False
        self._partial = bytearray()

    def feed(self, chunk: bytes) -> list[object]:
        """The complete `data:` events (parsed JSON) that `chunk` finishes; `[DONE]` sets `done`."""
        self.received += len(chunk)
        if self.received > self.max_response:
            raise SseTooLarge(f"SSE stream over the {self.max_response}-byte cap")
        events: list[object] = []
        view, start = memoryview(chunk), 0
        while (nl := chunk.find(b"\n", start)) >= 0:
            self._check_line(nl - start)
            if self._partial:
                self._partial += view[start:nl]
                line = bytes(self._partial)
                self._partial.clear()
            else:
                line = chunk[start:nl]
            start = nl + 1
            self._line(line, events)
        if start < len(chunk):
            self._check_line(len(chunk) - start)
            self._partial += view[start:]
        return events

    def _check_line(self, more: int) -> None:
        if len(self._partial) + more > self.max_line:
            raise SseTooLarge(f"SSE line over the {self.max_line}-byte cap")

    def _line(self, line: bytes, events: list[object]) -> None:
        line = line.rstrip(b"\r")
        if not line.startswith(b"data:"):
            return
        payload = line[5:].strip()
        if payload == b"[DONE]":
            self.done = True
            return
        events.append(validate.load(payload))  # validate.Invalid (a ValueError) on a hostile line


class CompletionStream:
    """Folds one streamed completion's body into a `Completion`; pure, fed chunks and their times.

    TTFT twice: to the first `data:` event and to the first event that carries a token (`text` or
    `token_ids`). `feed` returns True when reading should stop (`[DONE]`, or a framing error).
    """

    def __init__(self, out: Completion, max_line: int = MAX_LINE_BYTES, max_response: int = MAX_RESPONSE_BYTES):
        self.out = out
        self.reader = SseReader(max_line, max_response)
        self._first_choice: float | None = None
        self._broken = False

    def feed(self, chunk: bytes, now: float) -> bool:
        try:
            for ev in self.reader.feed(chunk):
                self._event(validate.Event.parse(ev), now)
        except SseTooLarge as e:
            return self._fail(ErrorReason.TOO_LARGE, str(e))
        except validate.Invalid as e:  # not JSON, wrong type, too deep, non-finite
            return self._fail(e.reason, e.detail)
        return self.reader.done

    def _fail(self, reason: ErrorReason, detail: str) -> bool:
        self.out.error, self.out.detail, self._broken = reason.value, detail[:512], True
        return True

    def _event(self, ev: validate.Event, now: float) -> None:
        out = self.out
        out.events += 1
        if out.ttft_event is None:
            out.ttft_event = now
        if ev.error is not None:
            out.error, out.detail = ErrorReason.STREAM_ERROR.value, ev.error
        if out.ttft_token is None and ev.token:
            out.ttft_token = now
        if self._first_choice is None and ev.choices:
            self._first_choice = now
        if ev.usage is not None:
            out.usage = ev.usage.as_dict()
        if ev.metrics is not None:
            out.server_metrics = ev.metrics
        if ev.kv_transfer_params is not None:
            out.kv_transfer_params = ev.kv_transfer_params
        if ev.token_ids and len(out.token_ids) < validate.MAX_OUTPUT_IDS:
            out.token_ids.extend(ev.token_ids[: validate.MAX_OUTPUT_IDS - len(out.token_ids)])

    def finish(self, total: float) -> Completion:
        """The completion once the body has ended (or reading stopped)."""
        out = self.out
        if self._broken:
            return out
        out.total = total
        if out.usage is not None and out.usage.get("completion_tokens") == 0:
            out.ttft_token = None  # nothing was generated: there is no first token to time, never a sample
            if out.error is None:
                out.error, out.detail = "protocol", "no token generated (usage.completion_tokens is 0)"
            return out
        if out.error is None and not self.reader.done:
            out.error, out.detail = "stream_error", "stream ended without [DONE]"
        elif out.error is None and out.ttft_token is None:
            if self._first_choice is None:
                out.error, out.detail = "protocol", "no token-bearing event"
            else:  # a server without return_token_ids and no text: the first choices event is the first
                out.ttft_token = self._first_choice  # token's (vLLM suppresses empty chunks)
                out.detail = "token event inferred (no text, no token_ids)"
        return out


def has_token(event: object) -> bool:
    """Whether an event's first choice carries a token; False for anything that is not a valid event."""
    try:
        return validate.Event.parse(event).token
    except validate.Invalid:
        return False


@dataclass
class Models:
    ids: list[str] = field(default_factory=list)
    max_model_len: dict[str, int] = field(default_factory=dict)


def parse_models(data: object) -> Models:
    m = validate.models(data)
    return Models(list(m.ids), dict(m.max_model_len))
