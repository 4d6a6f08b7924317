"""`check`'s answer to rounds that fail: a refusal ends the run at once, other failures are retried with the
back-off until a deadline; pure.

Why: a server that answers a completion with a 4xx twice in a row, with the same status, will answer the
next one the same way. The request is wrong for it (a context limit, an option it does not know, a key it
does not take) and waiting changes nothing, so the run ends with that status and the server's own words. A
5xx, a 429, a timeout or a dropped connection can pass (a restart, an overload): those are retried with the
doubling back-off, but only while the failing streak is younger than the deadline, so a server that fails
everything ends the run within a minute instead of being retried for minutes under an ETA of seconds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

RETRYABLE_4XX = frozenset({408, 425, 429})
"""4xx answers that say "later", not "never": request timeout, too early, too many requests."""

CONFIRMATIONS = 2
"""Refused attempts in a row, with the same status, that end the run: the second one (sent at once) rules out
a single stray answer."""

DEFAULT_DEADLINE = 45.0
"""Seconds a failing streak is retried by default: with the first round and preflight, a target that fails
every request ends `check` within a minute."""

MESSAGE_CHARS = 300
"""The server's message is cut here (it is quoted in one line of the report)."""

HINTS: dict[int, str] = {
    400: "the server rejects the canary's request as sent (a context limit, an option this vLLM does not know)",
    401: "the server wants an API key or refuses this one: --api-key-file FILE or $KVOFFLOAD_API_KEY",
    403: "the server (or a proxy) refuses this client or key",
    404: "no such route or model: --target is the vLLM base URL (without /v1), --model one of /v1/models",
    413: "the prompt is too large for the server or a proxy in front of it: lower --prefix-tokens",
    422: "the server rejects the canary's request as sent (a context limit, an option this vLLM does not know)",
}
"""What to look at per refused status (the server's own message comes first)."""


def refusal(status: int | None) -> bool:
    """A 4xx that says "never": the same request will be refused again."""
    return status is not None and 400 <= status < 500 and status not in RETRYABLE_4XX


def server_message(said: str, limit: int = MESSAGE_CHARS) -> str:
    """The server's own words on one line: the `message` (or `detail`) of an OpenAI/vLLM error body, else the
    body's text; cut at `limit` characters. `said` is already scrubbed of secrets (the client does that)."""
    text = said.strip()
    try:
        data = json.loads(text) if text.startswith("{") else None
    except (ValueError, RecursionError):
        data = None  # a body cut at the client's limit, or not JSON: the text itself
    if isinstance(data, dict):
        inner = data.get("error", data)
        msg = inner.get("message") or inner.get("detail") if isinstance(inner, dict) else inner
        if isinstance(msg, str) and msg.strip():
            text = msg
    text = " ".join(text.split()) or "(no message)"
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass
class Streak:
    """The rounds that failed in a row since the last completed one: their HTTP statuses, and the seconds
    the streak has lasted (the waits, and the failed rounds after its first)."""

    deadline: float = DEFAULT_DEADLINE
    failures: int = 0
    seconds: float = 0.0
    statuses: list[int | None] = field(default_factory=list)

    def success(self) -> None:
        self.failures, self.seconds, self.statuses = 0, 0.0, []

    def failed(self, status: int | None, round_seconds: float) -> None:
        if self.failures:
            self.seconds += max(0.0, round_seconds)
        self.failures += 1
        self.statuses.append(status)

    def refused(self) -> int | None:
        """The status when the last CONFIRMATIONS failures were the same refusal, else None."""
        last = self.statuses[-CONFIRMATIONS:]
        if len(last) == CONFIRMATIONS and refusal(last[0]) and all(s == last[0] for s in last):
            return last[0]
        return None

    def wait(self, backoff: float) -> float | None:
        """Seconds to wait before the next attempt: none to confirm a first refusal, else the back-off, cut so
        that the last attempt falls on the deadline; None once the deadline is reached (the run ends now)."""
        if refusal(self.statuses[-1] if self.statuses else None):
            return 0.0
        left = self.left()
        return None if left <= 0 else min(max(0.0, backoff), left)

    def waited(self, seconds: float) -> None:
        self.seconds += seconds

    def left(self) -> float:
        """Seconds until the deadline, counted in the streak's own time."""
        return max(0.0, self.deadline - self.seconds)


def refused_text(status: int, said: str, server: str = "target") -> str:
    """The run's error for a refusal: the server (`target` or `control target`), the status, the server's
    message, what to look at."""
    hint = HINTS.get(status)
    return (
        f"the {server} refused the canary's completions with HTTP {status} ({CONFIRMATIONS} attempts in a row): "
        f'"{server_message(said)}"' + (f"; {hint}" if hint else "")
    )


def gave_up_text(streak: Streak, detail: str, server: str = "target") -> str:
    """The run's error when the deadline ended a failing streak."""
    return (
        f"the {server} failed {streak.failures} rounds in a row over {streak.seconds:.0f} s (retry deadline "
        f"{streak.deadline:.0f} s, --retry-deadline); last: {detail}"
    )


__all__ = [
    "CONFIRMATIONS",
    "DEFAULT_DEADLINE",
    "RETRYABLE_4XX",
    "Streak",
    "gave_up_text",
    "refusal",
    "refused_text",
    "server_message",
]
