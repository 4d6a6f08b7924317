"""OpenAI `/v1/completions` as vLLM speaks it: request validation and response bodies, per version.

Pure: takes the decoded JSON body, returns a `Completion` or raises `ApiError` with vLLM's status
and error shape (`{"error": {"message", "type", "param", "code"}}`).
"""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeGuard

from kvoffload_exporter.sim.versions import Behaviour

DEFAULT_MAX_TOKENS = 16
_ERROR_TYPES = {
    400: "BadRequestError",
    401: "Unauthorized",
    404: "NotFoundError",
    429: "TooManyRequestsError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def body(self) -> dict[str, object]:
        return error_body(self.status, self.message, self.param)


def error_body(status: int, message: str, param: str | None = None) -> dict[str, object]:
    return {
        "error": {
            "message": message,
            "type": _ERROR_TYPES.get(status, "BadRequestError"),
            "param": param,
            "code": status,
        }
    }


MAX_TOKEN_ID = 2**63
"""Token ids at or above this do not fit the int64 vLLM keeps them in."""


def tokenize(text: str) -> tuple[int, ...]:
    """Whitespace words → ids: `w<i>` is id i (the vllm-cpu fixture's tokenizer), others hash."""
    out = []
    for word in text.split():
        digits = word[1:]
        if word[:1] == "w" and 0 < len(digits) <= 19 and digits.isascii() and digits.isdigit():
            out.append(int(digits))  # under 10**19: may still be past MAX_TOKEN_ID, refused like an id list
        else:
            out.append(zlib.crc32(word.encode()) % 150_000)
    return tuple(out)


def detokenize(ids: tuple[int, ...] | list[int]) -> str:
    return "".join(f" w{i}" for i in ids)


@dataclass(frozen=True)
class Completion:
    request_id: str
    prompt_ids: tuple[int, ...]
    max_tokens: int
    stream: bool
    include_usage: bool
    continuous_usage: bool
    return_token_ids: bool
    cache_salt: str | None
    kv_transfer_params: Mapping[str, object] | None
    skip_prefix_cache: bool
    created: int


def _int_list(v: object) -> TypeGuard[list[int]]:
    return isinstance(v, list) and all(type(x) is int for x in v)


def _prompt(raw: object, b: Behaviour) -> tuple[int, ...]:
    if isinstance(raw, list) and len(raw) == 1 and (isinstance(raw[0], str) or _int_list(raw[0])):
        raw = raw[0]  # a batch of one
    if isinstance(raw, str):
        ids = tokenize(raw)
    elif _int_list(raw):
        ids = tuple(raw)
        if any(i < 0 for i in ids):
            raise ApiError(
                400, "Token ids must be non-negative." if b.nonnegative_ids else "Token id out of vocabulary.", "prompt"
            )
    elif isinstance(raw, list) and raw:
        raise ApiError(400, "The simulator serves one prompt per request; send the prompts separately.", "prompt")
    else:
        raise ApiError(400, "prompt must be a string, a list of token ids, or a batch of one of them.", "prompt")
    if not ids:
        raise ApiError(400, "Prompt cannot be empty.", "prompt")
    if max(ids) >= MAX_TOKEN_ID:  # vLLM keeps ids as int64: a larger one is refused, never a 500
        raise ApiError(400, "Token id out of vocabulary.", "prompt")
    return ids


def _salt(raw: object, b: Behaviour) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw:
        raise ApiError(400, "Parameter 'cache_salt' must be a non-empty string if provided.", "cache_salt")
    if b.strict_salt and (len(raw) > 128 or any(c in raw for c in "@/\\\x00")):
        raise ApiError(
            400,
            "Parameter 'cache_salt' must be at most 128 characters and must not contain '@', '/', '\\' or NUL.",
            "cache_salt",
        )
    return raw


def _bool(body: Mapping[str, object], key: str, default: bool = False) -> bool:
    v = body.get(key, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise ApiError(400, f"{key} must be a boolean.", key)
    return v


def _max_tokens(body: Mapping[str, object], prompt_len: int, max_model_len: int) -> int:
    """max_tokens as vLLM checks it: at least 1, and prompt plus completion within the context."""
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    if type(max_tokens) is not int or max_tokens < 1:
        raise ApiError(400, f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens")
    if prompt_len > max_model_len:
        raise ApiError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"request has {prompt_len} input tokens. Please reduce the length of the input.",
        )
    if prompt_len + max_tokens > max_model_len:
        raise ApiError(
            400,
            f"'max_tokens' is too large: {max_tokens}. This model's maximum context length is "
            f"{max_model_len} tokens and your request has {prompt_len} input tokens "
            f"({max_tokens} > {max_model_len} - {prompt_len}).",
            "max_tokens",
        )
    return max_tokens


def _stream_options(body: Mapping[str, object], stream: bool) -> Mapping[str, object]:
    """stream_options: only with stream=True, and an object; {} when absent."""
    options = body.get("stream_options")
    if options is not None and not stream:
        raise ApiError(400, "Stream options can only be defined when `stream=True`.", "stream_options")
    if options is not None and not isinstance(options, dict):
        raise ApiError(400, "stream_options must be an object.", "stream_options")
    return options or {}


def parse_completion(body: object, b: Behaviour, served_model: str, max_model_len: int, created: int) -> Completion:
    """Validate a `/v1/completions` body like vLLM's OpenAI server does (the parts the simulator uses).

    `created`: the response's Unix time, from the simulator's wall clock."""
    if not isinstance(body, dict):
        raise ApiError(400, "JSON decode error: the body must be a JSON object.")
    model = body.get("model")
    if model is not None and model != served_model:
        raise ApiError(404, f"The model `{model}` does not exist.", "model")
    if "prompt" not in body:
        raise ApiError(400, "Field required: prompt", "prompt")
    ids = _prompt(body["prompt"], b)
    max_tokens = _max_tokens(body, len(ids), max_model_len)
    n = body.get("n", 1)
    if n != 1:
        raise ApiError(400, "The simulator supports n=1 only.", "n")
    stream = _bool(body, "stream")
    options = _stream_options(body, stream)
    include = options.get("include_usage")
    if include is None:
        include = b.include_usage_default and "stream_options" in body
    kv = body.get("kv_transfer_params")
    if kv is not None and not isinstance(kv, dict):
        raise ApiError(400, "kv_transfer_params must be an object.", "kv_transfer_params")
    skip = body.get("prompt_logprobs") is not None or (_bool(body, "echo") and body.get("logprobs") is not None)
    rid = body.get("request_id")
    return Completion(
        request_id=f"cmpl-{rid}" if isinstance(rid, str) and rid else f"cmpl-{uuid.uuid4().hex}",
        prompt_ids=ids,
        max_tokens=max_tokens,
        stream=stream,
        include_usage=bool(include),
        continuous_usage=bool(options.get("continuous_usage_stats")),
        return_token_ids=_bool(body, "return_token_ids"),
        cache_salt=_salt(body.get("cache_salt"), b),
        kv_transfer_params=kv,
        skip_prefix_cache=skip,
        created=created,
    )


def usage(prompt_tokens: int, completion_tokens: int, cached: int, details: bool, b: Behaviour) -> dict[str, object]:
    out: dict[str, object] = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }
    if details and (cached or b.details_when_zero):
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    return out


def _head(c: Completion, model: str) -> dict[str, object]:
    return {"id": c.request_id, "object": "text_completion", "created": c.created, "model": model}


def token_chunk(c: Completion, model: str, ids: list[int], finish: str | None, first: bool) -> dict[str, object]:
    """One SSE event carrying output tokens (exclude_unset: only the fields vLLM sets)."""
    choice: dict[str, object] = {
        "index": 0,
        "text": detokenize(ids),
        "logprobs": None,
        "finish_reason": finish,
        "stop_reason": None,
    }
    if c.return_token_ids:
        choice["token_ids"] = ids
        if first:
            choice["prompt_token_ids"] = list(c.prompt_ids)
    return {**_head(c, model), "choices": [choice], "kv_transfer_params": None}


def usage_chunk(
    c: Completion, model: str, use: dict[str, object], metrics: dict[str, float] | None
) -> dict[str, object]:
    out = {**_head(c, model), "choices": [], "usage": use}
    if metrics is not None:
        out["metrics"] = metrics
    return out


def completion_body(
    c: Completion, model: str, ids: list[int], use: dict[str, object], metrics: dict[str, float] | None
) -> dict[str, object]:
    choice: dict[str, object] = {
        "index": 0,
        "text": detokenize(ids),
        "logprobs": None,
        "finish_reason": "length",
        "stop_reason": None,
        "prompt_logprobs": None,
    }
    if c.return_token_ids:
        choice["prompt_token_ids"] = list(c.prompt_ids)
        choice["token_ids"] = ids
    out = {
        **_head(c, model),
        "choices": [choice],
        "service_tier": None,
        "system_fingerprint": None,
        "usage": use,
        "kv_transfer_params": None,
    }
    if metrics is not None:
        out["metrics"] = metrics
    return out


def models_body(model: str, root: str, max_model_len: int, created: int) -> dict[str, object]:
    return {
        "object": "list",
        "data": [
            {
                "id": model,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": root,
                "parent": None,
                "max_model_len": max_model_len,
                "permission": [
                    {
                        "id": f"modelperm-{uuid.uuid4().hex[:16]}",
                        "object": "model_permission",
                        "created": created,
                        "allow_create_engine": False,
                        "allow_sampling": True,
                        "allow_logprobs": True,
                        "allow_search_indices": False,
                        "allow_view": True,
                        "allow_fine_tuning": False,
                        "organization": "*",
                        "group": None,
                        "is_blocking": False,
                    }
                ],
            }
        ],
    }
