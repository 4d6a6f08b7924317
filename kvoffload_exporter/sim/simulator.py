"""A whole simulated vLLM server without I/O: its engines, router, faults and `/metrics` body.

`server` wraps this in aiohttp; tests can use it directly with an injected clock.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from kvoffload_exporter.ingest.backends import Backend
from kvoffload_exporter.sim.backends import (
    BACKENDS,
    FORMER_NAMES,
    NO_CONNECTOR,
    Shaping,
    corrupted_requests,
    reshape,
)
from kvoffload_exporter.sim.calibration import CALIBRATIONS, DEFAULT_CALIBRATION, Calibration
from kvoffload_exporter.sim.engine import Engine, EngineConfig
from kvoffload_exporter.sim.faults import ONE_SHOT, Fault, FaultError, FaultSet, parse_fault
from kvoffload_exporter.sim.output import DEPENDS_ON
from kvoffload_exporter.sim.profiles import render
from kvoffload_exporter.sim.timing import TimeModel
from kvoffload_exporter.sim.versions import DEFAULT_VERSION, behaviour

TIMING_FIELDS = tuple(
    f.name for f in fields(Calibration) if f.type in ("float", float) and f.name not in ("gpu_memory_utilization",)
)
ENGINE_FIELDS = (
    "block_size",
    "num_gpu_blocks",
    "max_model_len",
    "offload_block_size",
    "cpu_bytes",
    "kv_bytes_per_token",
    "gpu_memory_utilization",
    "store_report_delay_s",
)


@dataclass(frozen=True)
class SimOptions:
    version: str = DEFAULT_VERSION
    engines: int = 1
    calibration: str = DEFAULT_CALIBRATION
    model: str | None = None  # served name; default: the calibration's model
    faults: tuple[str, ...] = ()
    connector: bool = True
    time_scale: float = 1.0  # wall seconds per simulated second (0.1 = ten times faster)
    seed: int | None = None
    noise: bool = True
    api_key: str | None = None
    prompt_tokens_details: bool = True  # --enable-prompt-tokens-details, as in the H200 runs
    per_request_metrics: bool = True  # --enable-per-request-metrics (0.25+), as in the H200 runs
    show_hidden_metrics: bool = False  # --show-hidden-metrics-for-version=<previous minor>
    output_depends_on: str = "prompt"  # sim/output.py DEPENDS_ON: the whole prompt, or its last token
    backend: str = Backend.NATIVE  # how offload is reported: sim.backends.BACKENDS (the exporter's names)
    # Any: EngineConfig's fields, each its own type, applied with replace(**)
    engine: Mapping[str, Any] = field(default_factory=dict)  # EngineConfig overrides (ENGINE_FIELDS)
    timing: Mapping[str, float] = field(default_factory=dict)  # Calibration overrides (TIMING_FIELDS)

    def check(self) -> list[str]:
        errors = []
        if self.calibration not in CALIBRATIONS:
            errors.append(f"unknown calibration {self.calibration!r}; known: {', '.join(CALIBRATIONS)}")
        if self.engines < 1:
            errors.append("engines must be >= 1")
        if self.output_depends_on not in DEPENDS_ON:
            errors.append(f"output depends on one of {', '.join(DEPENDS_ON)}, not {self.output_depends_on!r}")
        if self.backend in FORMER_NAMES:
            errors.append(f"backend {self.backend!r} is spelt {FORMER_NAMES[self.backend]!s} now")
        elif self.backend not in BACKENDS:
            errors.append(f"unknown backend {self.backend!r}; known: {', '.join(BACKENDS)}")
        if self.time_scale <= 0:
            errors.append("time scale must be > 0")
        try:
            behaviour(self.version)
        except ValueError as e:
            errors.append(str(e))
        for f in self.faults:
            try:
                parse_fault(f)
            except FaultError as e:
                errors.append(str(e))
        errors += [f"unknown engine option {k!r}" for k in self.engine if k not in ENGINE_FIELDS]
        errors += [f"unknown timing option {k!r}" for k in self.timing if k not in TIMING_FIELDS]
        return errors


class Simulator:
    def __init__(
        self, opts: SimOptions, clock: Callable[[], float] | None = None, wall: Callable[[], float] = time.time
    ):
        errors = opts.check()
        if errors:
            raise ValueError("; ".join(errors))
        self.opts = opts
        self.behaviour = behaviour(opts.version)
        # Any: applied to Calibration's typed fields with replace(**)
        timing: dict[str, Any] = dict(opts.timing)
        self.calibration = replace(CALIBRATIONS[opts.calibration], **timing)
        self.clock = clock or (lambda: time.monotonic() / opts.time_scale)
        self.wall = wall
        cfg = EngineConfig.from_calibration(self.calibration, connector=self._has_connector(), **dict(opts.engine))
        if opts.model:
            cfg = replace(cfg, model_name=opts.model)
        self.config = cfg
        seed = opts.seed if opts.seed is not None else random.randrange(1 << 30)
        self.engines = [
            Engine(
                i,
                cfg,
                self.behaviour,
                TimeModel(self.calibration, random.Random(seed * 7919 + i), opts.noise),
                self.clock,
                wall,
                random.Random(seed * 104729 + i),
            )
            for i in range(opts.engines)
        ]
        self.faults = FaultSet()
        self.started = wall()
        self._last_restart = self.clock()
        self._rr = 0
        self.update_faults(add=opts.faults)

    @property
    def model(self) -> str:
        return self.config.model_name

    # ---- faults ------------------------------------------------------------------------------
    def update_faults(self, add: Iterable[str] = (), remove: Iterable[str] = ()) -> list[str]:
        """Add/remove faults (all parsed before any is applied); returns the active set."""
        parsed = [parse_fault(a) for a in add]
        for name in remove:
            self.faults.remove(str(name))
        for f in parsed:
            if f.name in ONE_SHOT and f.arg is None:
                self.restart()
            else:
                self.faults.add(f)
        self._apply()
        return self.faults.names()

    def _apply(self) -> None:
        slow = self.faults.get("slow-load")
        corrupt = self.faults.get("corrupt-loads")
        for e in self.engines:
            e.output_depends_on = self.opts.output_depends_on
            e.corrupt_loads = corrupt.number() if corrupt else 0.0
            # promotion-failures: the fs tier finds the chunks but none reaches the GPU (tiering reports why)
            e.tier.forgetful = "store-without-load" in self.faults or "promotion-failures" in self.faults
            e.timing.slow_load = slow.number() if slow else 1.0
            e.connector = self._has_connector() and "no-connector" not in self.faults

    def _has_connector(self) -> bool:
        """The engines run the OffloadingConnector unless told not to or the backend is no offload tier."""
        return self.opts.connector and self.opts.backend not in NO_CONNECTOR

    def restart(self) -> None:
        for e in self.engines:
            e.restart()
        self._last_restart = self.clock()

    def fault(self, name: str) -> Fault | None:
        return self.faults.get(name)

    # ---- requests ------------------------------------------------------------------------------
    def pick(self, rank: int | None = None) -> Engine:
        """`X-data-parallel-rank` pins an engine; otherwise the least busy one, round-robin on ties."""
        if rank is not None:
            if not 0 <= rank < len(self.engines):
                raise ValueError(f"data parallel rank {rank} out of range [0, {len(self.engines)})")
            return self.engines[rank]
        self.advance()
        self._rr += 1
        n = len(self.engines)
        order = [self.engines[(self._rr + i) % n] for i in range(n)]
        return min(
            order,
            key=lambda e: (
                e.stats.gauges.get("num_requests_running", {}).get((), 0.0)
                + e.stats.gauges.get("num_requests_waiting", {}).get((), 0.0)
            ),
        )

    def advance(self) -> None:
        now = self.clock()
        periodic = self.faults.get("restart")
        if periodic is not None and (now - self._last_restart) * self.opts.time_scale >= periodic.number():
            self.restart()
        for e in self.engines:
            e.advance(now)

    # ---- /metrics --------------------------------------------------------------------------------
    def metrics_text(self) -> str:
        self.advance()
        rename = self.faults.get("rename")
        text = render(
            self.opts.version,
            self.engines,
            variant=rename.value if rename else None,
            show_hidden=self.opts.show_hidden_metrics,
        )
        text = reshape(text, self.opts.backend, self.engines, self._shaping())
        nan = self.faults.get("nan-logits")
        return text + corrupted_requests(self.engines, nan.number()) if nan else text

    def _shaping(self) -> Shaping:
        bp = self.faults.get("backpressure")
        return Shaping(
            errors="store-errors" in self.faults,
            promotion_failures="promotion-failures" in self.faults,
            load_errors="load-errors" in self.faults,
            shed=bp.number() if bp else Shaping.shed,
            version=self.behaviour.v,
        )

    # Any: GET /_sim/state's JSON, read back by demo and the tests
    def state(self) -> dict[str, Any]:
        """The simulator's own view (GET /_sim/state): what vLLM itself does not export."""
        self.advance()
        return {
            "version": self.behaviour.text,
            "model": self.model,
            "calibration": self.calibration.name,
            "connector": any(e.connector for e in self.engines),
            "faults": self.faults.names(),
            "engines": [{"engine": e.index, **e.cache_state()} for e in self.engines],
        }


def truncate(text: str) -> str:
    """Cut the body in the middle of a sample line (fault `metrics-truncated`)."""
    cut = len(text) // 2
    while cut < len(text) and text[cut] in "#\n":
        cut += 1
    line_end = text.find("\n", cut)
    return text[: cut + max(1, (line_end - cut) // 2)] if line_end > cut else text[:cut]


def pad(text: str, size: int) -> str:
    """Append label-heavy series until the body reaches `size` bytes (fault `metrics-huge`)."""
    parts = [
        text,
        "# HELP vllm:sim_padding Padding series of the metrics-huge fault.\n",
        "# TYPE vllm:sim_padding gauge\n",
    ]
    total = sum(len(p) for p in parts)
    i = 0
    while total < size:
        line = f'vllm:sim_padding{{engine="0",series="{i:08d}",filler="{"x" * 64}"}} 0.0\n'
        parts.append(line)
        total += len(line)
        i += 1
    return "".join(parts)
