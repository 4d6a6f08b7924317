"""What a prepared run and its steps may use of the canary: an explicit, typed seam instead of the engine.

`CanaryEngine` (engine.py) is the composition root: it builds the client, prompts, scrapes, budget, state
and clock and satisfies `RunContext` structurally. Preflight, `PreparedRun`, the cycle steps, the strategies
and the load sweep are typed against `RunContext` only, so none of them imports the engine (no import loop)
and a test can hand them any object with these members.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from kvoffload_exporter.canary.config import CanarySettings
    from kvoffload_exporter.canary.cycle.budget import Backoff, TokenBudget
    from kvoffload_exporter.canary.cycle.plan import Prompts
    from kvoffload_exporter.canary.cycle.records import RequestRecord
    from kvoffload_exporter.canary.cycle.scrapes import Scrapes
    from kvoffload_exporter.canary.cycle.state import CanaryState
    from kvoffload_exporter.canary.wire.protocol import Completion


class Transport(Protocol):
    """What the canary needs from the HTTP client (client.CanaryClient implements it)."""

    async def complete(self, base_url: str, body: dict[str, object]) -> Completion: ...
    async def get(self, base_url: str, path: str) -> tuple[int | None, object]: ...
    async def metrics(self, base_url: str) -> str: ...
    async def version(self, base_url: str) -> str | None: ...


Sleep = Callable[[float], Awaitable[None]]
Progress = Callable[[str, Any], None]


class RunContext(Protocol):
    """The members a prepared run, its steps and the load sweep use."""

    url: str
    control_url: str | None
    settings: CanarySettings
    client: Transport
    prompts: Prompts
    scrapes: Scrapes
    budget: TokenBudget
    backoff: Backoff
    state: CanaryState
    clock: Callable[[], float]
    sleep: Sleep
    progress: Progress

    def url_of(self, role: str) -> str: ...
    def next_request_no(self) -> int: ...
    def spend(self, tokens: int) -> None: ...
    def record_request(self, rec: RequestRecord) -> None: ...


__all__ = ["Progress", "RunContext", "Sleep", "Transport"]
