"""The one SSE parser and the pure folding of a streamed completion, without a server."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from kvoffload_exporter.canary.wire.protocol import (
    MAX_LINE_BYTES,
    Completion,
    CompletionStream,
    SseReader,
    SseTooLarge,
)


def _event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


TOKEN = {"choices": [{"index": 0, "text": "", "token_ids": [42]}]}
USAGE = {
    "choices": [],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 2}},
}


def _fold(*chunks: tuple[float, bytes]) -> Completion:
    s = CompletionStream(Completion(status=200))
    for now, chunk in chunks:
        if s.feed(chunk, now):
            break
    return s.finish(9.0)


def test_fold_measures_both_ttfts_and_keeps_usage_and_metrics() -> None:
    c = _fold(
        (0.1, b": keep-alive\n\n" + _event({"choices": [{"index": 0, "text": ""}]})),
        (0.3, _event(TOKEN)),
        (0.4, _event({**USAGE, "metrics": {"queue_time_ms": 1.5}, "kv_transfer_params": {"x": 1}})),
        (0.5, b"data: [DONE]\n\n"),
    )
    assert c.ok, c.detail
    assert (c.ttft_event, c.ttft_token, c.total, c.events) == (0.1, 0.3, 9.0, 3)
    assert c.cached_tokens == 2 and c.tokens_spent == 4
    assert c.server_metrics == {"queue_time_ms": 1.5} and c.kv_transfer_params == {"x": 1}


def test_fold_infers_the_token_event_without_text_or_token_ids() -> None:
    c = _fold((0.2, _event({"choices": [{"index": 0, "text": ""}]}) + b"data: [DONE]\n\n"))
    assert c.ok and c.ttft_token == 0.2 and "inferred" in c.detail


@pytest.mark.parametrize(
    "body,error",
    [
        (_event({"error": {"message": "engine died"}}) + b"data: [DONE]\n\n", "stream_error"),
        (_event(TOKEN), "stream_error"),  # ends without [DONE]
        (_event({"usage": {}}) + b"data: [DONE]\n\n", "protocol"),  # no event with choices
        (b"data: {not json\n\n", "protocol"),
    ],
)
def test_fold_failures_are_closed_reasons(body: bytes, error: str) -> None:
    assert _fold((0.1, body)).error == error


def test_reader_is_the_same_for_every_chunking() -> None:
    body = b": c\r\n\r\n" + _event(TOKEN) + _event(USAGE) + b"event: x\ndata:[DONE]\n\n"
    whole = SseReader()
    assert whole.feed(body) == [TOKEN, USAGE] and whole.done
    for size in (1, 2, 3, 7, 64):
        r = SseReader()
        got = [ev for i in range(0, len(body), size) for ev in r.feed(body[i : i + size])]
        assert got == [TOKEN, USAGE] and r.done, size


def test_many_small_chunks_of_a_long_line() -> None:
    """A 4 MiB event in 64-byte chunks (65,536 feeds). Linear: each byte is scanned once; the old
    `buf += chunk` then search-the-whole-buffer reader rescanned and recopied ~128 GiB here."""
    ids = list(range(700_000))
    body = _event({"choices": [{"index": 0, "text": "", "token_ids": [1], "prompt_token_ids": ids}]})
    body += b"data: [DONE]\n\n"
    assert 3 * 2**20 < len(body) < MAX_LINE_BYTES
    r = SseReader()
    events = [ev for i in range(0, len(body), 64) for ev in r.feed(body[i : i + 64])]
    assert r.done and len(events) == 1
    assert events[0]["choices"][0]["prompt_token_ids"] == ids  # type: ignore[index]


def _huge_line(total: int, chunk: int, fed: list[int]) -> Iterator[bytes]:
    """`data: xxxx…` without a newline, `total` bytes in `chunk`-byte pieces; counts what was taken."""
    piece = b"data: " + b"x" * (chunk - 6)
    for _ in range(total // chunk):
        fed.append(1)
        yield piece
        piece = b"x" * chunk


def test_a_64_mib_line_fails_at_the_line_cap_not_at_the_end() -> None:
    fed: list[int] = []
    r = SseReader()
    with pytest.raises(SseTooLarge, match="line over the 8388608-byte cap"):
        for chunk in _huge_line(64 * 2**20, 2**20, fed):
            r.feed(chunk)
    assert len(fed) == 9  # 8 MiB accepted, the 9th MiB crosses the cap: 55 MiB never read


def test_a_response_over_its_cap_fails_even_with_short_lines() -> None:
    r = SseReader(max_response=10_000)
    with pytest.raises(SseTooLarge, match="stream over the 10000-byte cap"):
        for _ in range(1000):
            r.feed(_event({"choices": []}))


def test_fold_reports_the_cap_as_too_large_and_stops() -> None:
    s = CompletionStream(Completion(status=200), max_line=1024)
    assert s.feed(b"data: " + b"x" * 2000, 0.1) is True
    c = s.finish(1.0)
    assert c.error == "too_large" and "1024-byte cap" in c.detail
