"""Closed sets of the canary as StrEnums (neutral module: the engine, stats, report and the catalogue
share them without importing each other). Members are `str`, so they serialise as their values."""

from __future__ import annotations

from enum import StrEnum


class CanaryPath(StrEnum):
    """What a timed canary request measured (label `path`)."""

    COLD = "cold"
    GPU_HIT = "gpu_hit"
    OFFLOAD_HIT = "offload_hit"
    RECOMPUTE = "recompute"
    CONTROL_TARGET = "control_target"


class ProbeResult(StrEnum):
    """Classification of a revisit probe (label `result`); `error` when the probe failed."""

    OFFLOAD_HIT = "offload_hit"
    GPU_HIT = "gpu_hit"
    PARTIAL = "partial"
    MISS = "miss"
    ERROR = "error"


class CycleReason(StrEnum):
    """Why a canary cycle ended as it did (label `reason`; see docs/canary.md)."""

    OK = "ok"
    NO_STORE = "no_store"
    NOT_DISPLACED = "not_displaced"
    NO_LOAD = "no_load"
    EVICTED_FROM_TIER = "evicted_from_tier"
    LOADED_BUT_SLOWER = "loaded_but_slower"
    ERROR = "error"


class VerdictKind(StrEnum):
    """The canary's verdict (label `verdict` of the kvoffload_canary_verdict state set)."""

    OFFLOAD_FASTER = "offload_faster"
    OFFLOAD_SLOWER = "offload_slower"
    NO_OFFLOAD_HIT = "no_offload_hit"
    INCONCLUSIVE = "inconclusive"


class Tier(StrEnum):
    """Cache tier a residency time is measured for (label `tier`)."""

    GPU = "gpu"
    OFFLOAD = "offload"


class Strategy(StrEnum):
    """How a cycle displaces its prefix: fillers (pressure, staging only) or growing idle times (wait)."""

    PRESSURE = "pressure"
    WAIT = "wait"


class LoadBand(StrEnum):
    """The target's load around a canary cycle (label `load_band`; thresholds: records.load_band)."""

    IDLE = "idle"
    LOW = "low"
    HIGH = "high"


class ErrorReason(StrEnum):
    """Why a canary request, preparation or cycle failed (label `reason` of kvoffload_canary_errors_total).

    The first eleven are a completion's own (protocol.Completion.error): the answer's status, transport or
    content; then the preflight's refusals (errors.CanaryError), a failed `/metrics` read in a cycle, the
    token budget running out mid-cycle, and `internal` for anything else (a bug: logged, retried)."""

    HTTP_429 = "http_429"
    HTTP_5XX = "http_5xx"
    HTTP_4XX = "http_4xx"
    TIMEOUT = "timeout"
    CONNECT = "connect"
    STREAM_ERROR = "stream_error"
    PROTOCOL = "protocol"
    INVALID = "invalid"
    TOO_LARGE = "too_large"
    TOO_DEEP = "too_deep"
    NON_FINITE = "non_finite"
    HEALTH = "health"
    AUTH = "auth"
    MODELS = "models"
    MODEL_MISMATCH = "model_mismatch"
    PLAN = "plan"
    METRICS = "metrics"
    BUDGET = "budget"
    INTERNAL = "internal"

    @classmethod
    def of(cls, value: object) -> ErrorReason:
        """The member named by `value`; `internal` for anything outside the closed set."""
        try:
            return cls(str(value))
        except ValueError:
            return cls.INTERNAL
