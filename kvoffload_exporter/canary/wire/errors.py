"""The canary's three exceptions: preflight refused, one cycle failed, budget exhausted (no I/O).

Each carries a closed reason (types.ErrorReason) besides its sentence: the reason is counted in
kvoffload_canary_errors_total, the sentence goes to the log and the evidence (already scrubbed of
secrets by the client that read it)."""

from __future__ import annotations

from kvoffload_exporter.canary.types import ErrorReason


class CanaryError(Exception):
    """The canary cannot run against this target (preflight) — `reason` is a short closed word."""

    def __init__(self, reason: str, detail: str, role: str = "target"):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.role = role  # the server to fix: "target" or "control" (records.TARGET / CONTROL)


class CycleFailed(Exception):
    """One request or scrape of a cycle failed; the cycle is recorded as an error, not raised further."""

    def __init__(
        self,
        detail: str,
        retry_after: float | None = None,
        reason: str = ErrorReason.INTERNAL,
        status: int | None = None,
        said: str = "",
        role: str | None = None,
    ):
        super().__init__(detail)
        self.detail = detail
        self.retry_after = retry_after
        self.reason = ErrorReason.of(reason)
        self.status = status  # the HTTP status of a refused request (None: no answer, or not a request)
        self.said = said  # the server's own words (its error body, scrubbed by the client)
        self.role = role  # the server the failed request went to (None: not a request)


class BudgetExhausted(Exception):
    """The next request does not fit the hourly token budget (the cycle stops where it is)."""

    def __init__(self, wait: float):
        super().__init__(f"token budget exhausted for {wait:.0f}s")
        self.wait = wait
