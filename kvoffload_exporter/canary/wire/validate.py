"""Every JSON the canary reads from a target, parsed and validated into typed records; pure.

A target is not trusted: any field may have the wrong type, any number may be non-finite, negative
or absurd, any document may be nested 100,000 deep. Each of these is an `Invalid` with a closed
reason (types.ErrorReason: `invalid`, `too_deep`, `non_finite`) instead of a KeyError, a
RecursionError or a negative budget later on. Fields the canary does not use are dropped unread
(never stored), so their shape cannot matter beyond parsing; what is kept is bounded.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from kvoffload_exporter.canary.types import ErrorReason

MAX_DEPTH = 8
"""Deepest nesting kept from an answer (usage, per-request metrics, kv_transfer_params: 2-3 in vLLM)."""
MAX_ITEMS = 256
"""Most entries kept of one object or list (a usage has 4, per-request metrics about 10)."""
MAX_STRING = 1024
"""Longest string kept (a model name, a stop reason, an error message)."""
MAX_TOKENS = 1 << 31
"""Largest token count believed: no context is longer (a larger or negative count is `invalid`)."""
MAX_CHOICES = 16


class Invalid(ValueError):
    """A target's JSON that the canary refuses; `reason` is closed, `detail` says which field and why."""

    def __init__(self, reason: ErrorReason, detail: str):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def _non_finite(token: str) -> float:
    raise Invalid(ErrorReason.NON_FINITE, f"non-finite number {token}")


def _float(token: str) -> float:
    x = float(token)
    if not math.isfinite(x):
        raise Invalid(ErrorReason.NON_FINITE, f"number {token[:32]} overflows")
    return x


_DECODER = json.JSONDecoder(parse_constant=_non_finite, parse_float=_float)


def load(text: str | bytes) -> object:
    """One JSON document; Invalid for non-JSON (`protocol`), too deep for the parser, non-finite numbers."""
    try:
        s = text.decode("utf-8") if isinstance(text, bytes) else text
        return _DECODER.decode(s)
    except RecursionError:
        raise Invalid(ErrorReason.TOO_DEEP, "JSON nested deeper than the parser allows") from None
    except Invalid:
        raise
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, ints over 4300 digits
        raise Invalid(ErrorReason.PROTOCOL, f"not JSON: {str(e)[:200]}") from None


def bounded(value: object, what: str, depth: int = 0) -> object:
    """`value` as kept evidence: depth, item counts and string lengths within the caps, else Invalid."""
    if depth > MAX_DEPTH:
        raise Invalid(ErrorReason.TOO_DEEP, f"{what} nested deeper than {MAX_DEPTH}")
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        if len(value) > MAX_STRING:
            raise Invalid(ErrorReason.TOO_LARGE, f"{what} is a string of {len(value)} characters")
        return value
    if isinstance(value, list | dict) and len(value) > MAX_ITEMS:
        raise Invalid(ErrorReason.TOO_LARGE, f"{what} has {len(value)} entries (cap {MAX_ITEMS})")
    if isinstance(value, list):
        return [bounded(v, what, depth + 1) for v in value]
    if isinstance(value, dict):
        return {str(bounded(k, what, depth + 1)): bounded(v, what, depth + 1) for k, v in value.items()}
    raise Invalid(ErrorReason.INVALID, f"{what} holds a {type(value).__name__}")


def _kind(value: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def count(value: object, what: str, optional: bool = True) -> int | None:
    """A token count: an integer in [0, MAX_TOKENS) (None when absent and optional), else Invalid."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid(ErrorReason.INVALID, f"{what} is {_kind(value)}, not an integer")
    if not 0 <= value < MAX_TOKENS:
        raise Invalid(ErrorReason.INVALID, f"{what} = {value} is out of range")
    return value


def _obj(value: object, what: str) -> dict[str, object] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise Invalid(ErrorReason.INVALID, f"{what} is {_kind(value)}, not an object")
    return value


@dataclass(frozen=True)
class Usage:
    """`usage` of a completion: what was spent, and the prefix-cache hit the server reports."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None  # prompt_tokens_details.cached_tokens (absent: the server did not say)

    @classmethod
    def parse(cls, value: object) -> Usage | None:
        u = _obj(value, "usage")
        if not u:
            return None
        details = _obj(u.get("prompt_tokens_details"), "usage.prompt_tokens_details") or {}
        return cls(
            prompt_tokens=count(u.get("prompt_tokens"), "usage.prompt_tokens") or 0,
            completion_tokens=count(u.get("completion_tokens"), "usage.completion_tokens") or 0,
            cached_tokens=count(details.get("cached_tokens"), "usage.prompt_tokens_details.cached_tokens"),
        )

    def as_dict(self) -> dict[str, object]:
        """The evidence form: vLLM's own layout, only the fields read."""
        d: dict[str, object] = {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens}
        if self.cached_tokens is not None:
            d["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        return d


MAX_OUTPUT_IDS = 64
"""Generated token ids kept from one event (the canary asks for a few; a hostile stream sends more)."""


@dataclass(frozen=True)
class Event:
    """One SSE `data:` event of a streamed completion, validated; only what the canary reads."""

    token: bool  # the first choice carries a token (text or token_ids)
    choices: int
    usage: Usage | None
    metrics: dict[str, object] | None  # --enable-per-request-metrics
    kv_transfer_params: object
    error: str | None  # the message of an in-stream error event
    token_ids: tuple[int, ...] = ()  # the first choice's generated token ids (return_token_ids)

    @classmethod
    def parse(cls, ev: object) -> Event:
        e = _obj(ev, "event")
        if e is None:
            raise Invalid(ErrorReason.INVALID, "event is null, not an object")
        choices = e.get("choices")
        if choices is not None and not isinstance(choices, list):
            raise Invalid(ErrorReason.INVALID, f"choices is {_kind(choices)}, not a list")
        choices = choices or []
        if len(choices) > MAX_CHOICES:
            raise Invalid(ErrorReason.INVALID, f"{len(choices)} choices for one prompt")
        token = False
        for i, c in enumerate(choices):
            token |= _choice(c, f"choices[{i}]") and i == 0
        ids = choices[0].get("token_ids") if choices else None
        metrics = _obj(e.get("metrics"), "metrics")
        return cls(
            token=token,
            choices=len(choices),
            usage=Usage.parse(e.get("usage")),
            metrics=bounded(metrics, "metrics") if metrics else None,  # type: ignore[arg-type]
            kv_transfer_params=bounded(e.get("kv_transfer_params"), "kv_transfer_params"),
            error=_error(e["error"]) if "error" in e else None,
            token_ids=tuple(ids[:MAX_OUTPUT_IDS]) if isinstance(ids, list) else (),
        )


def _choice(c: object, what: str) -> bool:
    """Whether one choice carries a token; Invalid when its fields have the wrong types."""
    ch = _obj(c, what)
    if ch is None:
        raise Invalid(ErrorReason.INVALID, f"{what} is null, not an object")
    text, ids = ch.get("text"), ch.get("token_ids")
    if text is not None and not isinstance(text, str):
        raise Invalid(ErrorReason.INVALID, f"{what}.text is {_kind(text)}, not a string")
    if ids is not None and not (isinstance(ids, list) and all(type(t) is int for t in ids)):
        raise Invalid(ErrorReason.INVALID, f"{what}.token_ids is not a list of integers")
    return bool(text) or bool(ids)


def _error(err: object) -> str:
    """An in-stream error's message, short; never the raw structure (it may be anything)."""
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        return str(err["message"])[:512]
    if isinstance(err, str):
        return err[:512]
    return f"error event ({_kind(err)})"


@dataclass(frozen=True)
class Models:
    """`/v1/models`: the served ids and their max_model_len where given."""

    ids: tuple[str, ...] = ()
    max_model_len: tuple[tuple[str, int], ...] = ()


MAX_MODELS = 64
"""Models read from `/v1/models` (a server serves one or a few; the list may end up in an error line)."""
MAX_MODEL_ID = 256


def models(data: object) -> Models:
    """Lenient by design (preflight names what is missing): entries of the wrong shape are skipped."""
    items = data.get("data") if isinstance(data, dict) else None
    ids: list[str] = []
    lens: list[tuple[str, int]] = []
    for m in items[:MAX_MODELS] if isinstance(items, list) else ():
        mid = m.get("id") if isinstance(m, dict) else None
        if not isinstance(mid, str) or not 0 < len(mid) <= MAX_MODEL_ID or not mid.isprintable():
            continue
        ids.append(mid)
        n = m.get("max_model_len")
        if type(n) is int and 0 < n < MAX_TOKENS:
            lens.append((mid, n))
    return Models(tuple(ids), tuple(lens))
