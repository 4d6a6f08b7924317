"""`GET /version` is optional: its answer is read under a small cap and accepted only as a short version
string. Anything else (a huge or deeply nested body, a version with control characters or 60 KB long)
gives no version, is counted by reason in VERSION_ERRORS, and never affects the target's `up`.

Pure: no I/O; `sources.vllm_http.fetch_version` does the request."""

from __future__ import annotations

import json
import re

MAX_VERSION_BODY = 4096  # vLLM answers {"version": "0.11.0"}: ~25 bytes
_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_~-]{0,63}")  # PEP 440 and git describe; a label value

VERSION_ERRORS: dict[str, int] = {}
"""reason -> count over the process (kvoffload_exporter_version_errors_total; reasons: catalogue)."""


class VersionError(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def count(reason: str) -> None:
    VERSION_ERRORS[reason] = VERSION_ERRORS.get(reason, 0) + 1


def parse_version(body: bytes) -> str:
    """`{"version": "0.11.0"}` -> "0.11.0"; anything else raises VersionError (reason `too_large`/`parse`)."""
    if len(body) > MAX_VERSION_BODY:
        raise VersionError("too_large", f"body over {MAX_VERSION_BODY} bytes")
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: `[[[[...` nested past the parser's stack
        raise VersionError("parse", "not JSON") from None
    v = data.get("version") if isinstance(data, dict) else None
    if not isinstance(v, str) or not _VERSION.fullmatch(v):
        raise VersionError("parse", "no short version string (at most 64 of [0-9A-Za-z.+_~-])")
    return v
