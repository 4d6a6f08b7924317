"""The canary's evidence records: server facts, run conditions, one row per request, phase and cycle.

Plain dataclasses, no behaviour beyond `as_dict`: `check` writes them as JSON lines, the engine and
the strategies fill them in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TypedDict, cast

from kvoffload_exporter.canary.cycle import plan as planning
from kvoffload_exporter.canary.types import CycleReason, LoadBand, ProbeResult, Strategy

TARGET, CONTROL = "target", "control"

HIGH_RUNNING = 8
"""Running requests from which a cycle counts as `high` load. On the H200 (vLLM 0.26, Qwen3-0.6B shape) the
tier's ΔTTFT went +24.9 ms at c=1, +12.6 ms at c=4, -7.1 ms at c=16: the sign flips between 4 and 16."""


def load_band(running: float, waiting: float) -> LoadBand:
    """idle: nothing else running or waiting; low: fewer than HIGH_RUNNING running and no queue; high:
    HIGH_RUNNING or more running, or any request waiting (a queue is where loads convoy, vllm#44294)."""
    if running <= 0 and waiting <= 0:
        return LoadBand.IDLE
    if waiting <= 0 and running < HIGH_RUNNING:
        return LoadBand.LOW
    return LoadBand.HIGH


@dataclass(frozen=True)
class CycleLoad:
    """Users' requests on the canary's model in the cycle's closing scrape (the canary's own are done)."""

    running: float
    waiting: float

    @property
    def band(self) -> LoadBand:
        return load_band(self.running, self.waiting)


@dataclass
class ServerInfo:
    url: str
    version: str | None
    model: str
    max_model_len: int | None
    generation: str
    cache_config: dict[str, str]
    offload_config: dict[str, str]


class ServerDoc(TypedDict, total=False):
    """A server of the check document's `conditions` (`ServerInfo`); total=False: the report also renders
    documents of older versions, which lack later keys."""

    url: str
    version: str | None
    model: str
    max_model_len: int | None
    generation: str
    cache_config: dict[str, str]
    offload_config: dict[str, str]


class ConditionsDoc(TypedDict, total=False):
    """`conditions` of the check document (`Conditions.as_dict`); total=False as `ServerDoc`."""

    target: ServerDoc
    control: ServerDoc | None
    facts: dict[str, int | bool | None]  # planning.CacheFacts
    sizing: planning.SizingDoc
    strategy: str
    salt_fingerprint: str
    gpu_cache_tokens: int | None


@dataclass
class Conditions:
    target: ServerInfo
    control: ServerInfo | None
    facts: planning.CacheFacts
    sizing: planning.Sizing
    strategy: Strategy
    salt_fingerprint: str

    def as_dict(self) -> ConditionsDoc:
        d = cast(ConditionsDoc, asdict(self))  # the fields above, as ConditionsDoc names them
        d["sizing"] = self.sizing.as_dict()
        d["gpu_cache_tokens"] = self.facts.gpu_cache_tokens
        return d

    def server(self, role: str) -> ServerInfo:
        """The server a role's requests go to (the target when there is no control)."""
        return self.control if role == CONTROL and self.control is not None else self.target


@dataclass
class RequestRecord:
    t: float
    cycle: int
    phase: str
    kind: str  # probe | filler | flush
    role: str  # target | control
    prompt_tokens: int
    salt: str  # family | fresh (the salt itself never leaves the process)
    kv_transfer_params: Mapping[str, object] | None
    status: int | None
    error: str | None
    detail: str
    ttft_first_event_seconds: float | None
    ttft_seconds: float | None
    total_seconds: float | None
    cached_tokens: int | None
    usage: dict[str, object] | None
    server_metrics: dict[str, object] | None
    concurrency: int | None = None  # load sweep: the burst's level
    counted: bool | None = None  # load sweep: the burst entered its level's statistics


@dataclass
class PhaseRecord:
    cycle: int
    phase: str
    role: str
    expect: str
    path: str
    counted: bool  # entered the TTFT statistics of `path`
    classification: str | None  # None for the displacement phase
    ttft_seconds: float | None
    ttft_first_event_seconds: float | None
    cached_tokens: int | None
    load_bytes: float
    store_bytes: float
    gpu_hit_tokens: float
    external_hit_tokens: float
    other_traffic_tokens: float
    ambiguous: bool = False
    idle_seconds: float | None = None
    note: str = ""
    # Loads/stores of backends that count no bytes (blocks, chunks, tokens): whether they happened.
    loaded_units: float = 0.0
    stored_units: float = 0.0
    output_token_ids: list[int] | None = None  # generated ids (return_token_ids); None when none came

    @property
    def loaded(self) -> bool:
        return self.load_bytes > 0 or self.loaded_units > 0

    @property
    def stored(self) -> bool:
        return self.store_bytes > 0 or self.stored_units > 0


@dataclass
class CycleRecord:
    cycle: int
    strategy: Strategy
    started: float
    finished: float
    result: ProbeResult  # the displaced revisit's classification, or error
    reason: CycleReason
    detail: str
    phases: list[PhaseRecord] = field(default_factory=list)
    load: CycleLoad | None = None  # serve --canary.enabled only (schedule.py); None when the scrape had no gauges
    order: list[str] = field(default_factory=list)  # the probes after the displacement, as run (order.py)
