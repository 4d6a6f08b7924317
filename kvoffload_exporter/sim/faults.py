"""Fault names the simulator understands, their meaning, and the set that is active.

A fault is `name` or `name=argument` (e.g. `rename=legacy-only`). Faults combine freely; they are
switched at start (`--fault`) or at run time (`POST /_sim/faults`).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvoffload_exporter.ingest.backends import Backend
from kvoffload_exporter.sim.profiles import VARIANTS

FAULTS: dict[str, str] = {
    "store-without-load": "the CPU tier never finds what it stored: lookups miss, every store writes again",
    "store-errors": f"the KV store answers every put with an error (reported by --backend {Backend.MOONCAKE_STORE}: "
    f"its bytes under status=error, no get; and {Backend.UMBP}: failed store objects, no bytes)",
    "slow-load": "CPU→GPU loads run at 1/N of the calibrated bandwidth (slow-load=N, default 10)",
    "no-connector": "no OffloadingConnector: no kv_offload_* families, no lookups, loads or stores",
    "restart": "the engines restart: every counter resets to 0 (restart=SECONDS repeats it periodically)",
    "rename": f"switch the offload metric generation ({', '.join(VARIANTS)}; default flat-only)",
    "metrics-500": "GET /metrics answers HTTP 500",
    "metrics-slow": "GET /metrics answers after a delay (metrics-slow=SECONDS, default 5)",
    "metrics-truncated": "GET /metrics body is cut off in the middle of a sample line",
    "metrics-huge": "GET /metrics body is padded to a huge size (metrics-huge=BYTES, default 20 MiB)",
    "down": "every endpoint except /_sim/* drops the connection without an answer",
    "corrupt-loads": "this fraction of requests served from the CPU tier answer other tokens (corrupt-loads=FRACTION, "
    "0 < FRACTION <= 1, default 1)",
    "completions-status": "POST /v1/completions answers this HTTP status with vLLM's error body "
    "(completions-status=CODE, 400-599, default 503)",
    "promotion-failures": f"with --backend {Backend.TIERING}: the fs tier finds every chunk asked for and every "
    "promotion into the CPU primary fails (failed promotion jobs, deferred release on 0.34), so nothing is loaded",
    "load-errors": f"with --backend {Backend.MOONCAKE_STORE}: the store finds the keys (external hits) and every "
    "get fails (load_get status=error, failed keys), so nothing is loaded while puts succeed",
    "backpressure": f"with --backend {Backend.TIERING}: the slow fs tier sheds this share of its cascade writes "
    "(backpressure=FRACTION, 0 < FRACTION <= 1, default 0.9; without the fault it sheds half)",
    "nan-logits": "this fraction of requests have NaNs in their logits, counted in vllm:corrupted_requests as "
    "with VLLM_COMPUTE_NANS_IN_LOGITS=1 (nan-logits=FRACTION, 0 < FRACTION <= 1, default 0.1)",
}
DEFAULT_ARGS = {
    "slow-load": "10",
    "rename": "flat-only",
    "metrics-slow": "5",
    "metrics-huge": str(20 << 20),
    "completions-status": "503",
    "corrupt-loads": "1",
    "backpressure": "0.9",
    "nan-logits": "0.1",
}
# Faults that act once when added instead of staying in effect (unless given a period).
ONE_SHOT = frozenset({"restart"})


class FaultError(ValueError):
    pass


@dataclass(frozen=True)
class Fault:
    name: str
    arg: str | None = None

    def __str__(self) -> str:
        return self.name if self.arg is None else f"{self.name}={self.arg}"

    @property
    def value(self) -> str | None:
        return self.arg if self.arg is not None else DEFAULT_ARGS.get(self.name)

    def number(self) -> float:
        try:
            v = float(self.value or "")
        except ValueError:
            raise FaultError(f"fault {self.name}: {self.value!r} is not a number") from None
        if v <= 0:
            raise FaultError(f"fault {self.name}: {self.value!r} must be > 0")
        return v


def parse_fault(text: str) -> Fault:
    name, sep, arg = str(text).strip().partition("=")
    if name not in FAULTS:
        raise FaultError(f"unknown fault {name!r}; known: {', '.join(sorted(FAULTS))}")
    fault = Fault(name, arg if sep else None)
    if name == "rename" and fault.value not in VARIANTS:
        raise FaultError(f"fault rename: choose one of {', '.join(VARIANTS)}")
    if name in ("slow-load", "metrics-slow", "metrics-huge") or (name == "restart" and fault.arg is not None):
        fault.number()
    if name in ("corrupt-loads", "backpressure", "nan-logits") and fault.number() > 1:
        raise FaultError(f"fault {name}: {fault.value!r} is a fraction, at most 1")
    if name == "completions-status" and fault.value not in {str(c) for c in range(400, 600)}:
        raise FaultError(f"fault completions-status: {fault.value!r} is not an HTTP status 400-599")
    return fault


class FaultSet:
    """Active faults by name (one argument per name; adding again replaces it)."""

    def __init__(self, faults: tuple[Fault, ...] = ()):
        self._active: dict[str, Fault] = {}
        for f in faults:
            self._active[f.name] = f

    def add(self, fault: Fault) -> None:
        self._active[fault.name] = fault

    def remove(self, name: str) -> bool:
        return self._active.pop(name.partition("=")[0], None) is not None

    def get(self, name: str) -> Fault | None:
        return self._active.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._active

    def names(self) -> list[str]:
        return [str(f) for f in self._active.values()]
