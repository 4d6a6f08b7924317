"""The canary's typed view of a target's JSON, the secret scrubber and the budget's floor, without a server
(the same cases end to end, on a loopback server: test_canary_hostile.py)."""

from __future__ import annotations

import json

import pytest

from kvoffload_exporter.canary.cycle.budget import TokenBudget
from kvoffload_exporter.canary.types import ErrorReason
from kvoffload_exporter.canary.wire import validate
from kvoffload_exporter.canary.wire.protocol import Completion, CompletionStream, has_token
from kvoffload_exporter.canary.wire.secrets import ApiKey, scrub


def _reason(raw: str) -> ErrorReason:
    with pytest.raises(validate.Invalid) as e:
        validate.Event.parse(validate.load(raw))
    return e.value.reason


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ('{"choices": {"0": {"text": "x"}}}', ErrorReason.INVALID),
        ('{"choices": ["x"]}', ErrorReason.INVALID),
        ('{"choices": [{"text": 5}]}', ErrorReason.INVALID),
        ('{"choices": [{"token_ids": [1, "2"]}]}', ErrorReason.INVALID),
        ('{"usage": "lots"}', ErrorReason.INVALID),
        ('{"usage": {"prompt_tokens": -1000000000000}}', ErrorReason.INVALID),
        ('{"usage": {"prompt_tokens": 3000000000}}', ErrorReason.INVALID),
        ('{"usage": {"prompt_tokens": true}}', ErrorReason.INVALID),
        ('{"usage": {"prompt_tokens": 1.5}}', ErrorReason.INVALID),
        ('{"usage": {"prompt_tokens": 1, "prompt_tokens_details": []}}', ErrorReason.INVALID),
        ('{"usage": {"prompt_tokens": NaN}}', ErrorReason.NON_FINITE),
        ('{"x": -Infinity}', ErrorReason.NON_FINITE),
        ('{"x": 1e999}', ErrorReason.NON_FINITE),
        ("[" * 100_000 + "]" * 100_000, ErrorReason.TOO_DEEP),
        ('{"kv_transfer_params": ' + '{"a": ' * 20 + "1" + "}" * 20 + "}", ErrorReason.TOO_DEEP),
        ('{"metrics": {"m": "' + "x" * 5000 + '"}}', ErrorReason.TOO_LARGE),
        ("[1, 2]", ErrorReason.INVALID),
        ("{not json", ErrorReason.PROTOCOL),
        ('{"n": ' + "9" * 5000 + "}", ErrorReason.PROTOCOL),
    ],
)
def test_every_hostile_event_is_one_closed_reason(raw: str, reason: ErrorReason) -> None:
    assert _reason(raw) == reason


def test_a_valid_event_keeps_only_what_is_read() -> None:
    ev = validate.Event.parse(
        {
            "choices": [{"text": "", "token_ids": [7], "prompt_token_ids": list(range(10))}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4, "extra": [[["x"]]]},
            "metrics": {"queue_time_ms": 1.5},
        }
    )
    assert ev.token and ev.usage == validate.Usage(3, 1, None)
    assert ev.usage.as_dict() == {"prompt_tokens": 3, "completion_tokens": 1}


def test_has_token_is_false_for_an_event_of_the_wrong_shape() -> None:
    assert not has_token({"choices": {"0": {"text": "x"}}})
    assert has_token({"choices": [{"text": "x"}]})


def test_a_stream_stops_at_the_first_invalid_event_with_its_reason() -> None:
    s = CompletionStream(Completion(status=200))
    assert s.feed(b'data: {"choices": [{"text": "x"}]}\n\ndata: {"usage": {"prompt_tokens": NaN}}\n\n', 0.1)
    c = s.finish(1.0)
    assert c.error == "non_finite" and c.total is None and c.tokens_spent == 0


def test_models_skips_entries_of_the_wrong_shape() -> None:
    m = validate.models({"data": [{"id": "m", "max_model_len": -5}, {"id": "x" * 5000}, {"id": 3}, "j"]})
    assert m.ids == ("m",) and m.max_model_len == ()
    assert validate.models({"data": {"id": "m"}}).ids == ()


def test_a_negative_or_non_integer_spend_never_lowers_the_budget() -> None:
    b = TokenBudget(1000, clock=lambda: 0.0)
    b.spend(-(10**12))
    b.spend(True)
    b.spend(10)
    assert b.total == 10 and b.remaining() == 990


def test_scrub_removes_the_key_and_any_credential_value() -> None:
    ApiKey("sk-scrub-test-42/+x")
    cases = {
        "you sent Authorization: Bearer sk-scrub-test-42/+x": "you sent Authorization: Bearer <redacted>",
        json.dumps({"auth": "sk-scrub-test-42/+x"}): '{"auth": "<redacted>"}',
        "key=sk-scrub-test-42%2F%2Bx": "key=<redacted>",
        '{"Authorization": "Basic dXNlcjpwYXNzd29yZA=="}': '{"Authorization": "Basic <redacted>"}',
        "headers={'authorization': 'other-token'}": "headers={'authorization': '<redacted>'}",
        "x-api-key: abc123": "x-api-key: <redacted>",
        'vllm:echo{auth="bearer zzz"} 1': 'vllm:echo{auth="bearer <redacted>"} 1',
        "basic offload works": "basic offload works",
    }
    for text, want in cases.items():
        assert scrub(text) == want, text


def test_canary_log_lines_are_scrubbed(caplog: pytest.LogCaptureFixture) -> None:
    from kvoffload_exporter.canary import schedule

    ApiKey("sk-log-scrub-77")
    with caplog.at_level("INFO", logger="kvoffload.canary"):
        schedule.log.info("server said %s", "Authorization: Bearer sk-log-scrub-77")
    assert caplog.records[-1].getMessage() == "server said Authorization: Bearer <redacted>"
