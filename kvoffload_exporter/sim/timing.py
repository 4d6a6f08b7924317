"""Time model: how long one request waits, loads, prefills and decodes, from a `Calibration`.

Pure and deterministic for a given `random.Random`; `noise=False` gives the modelled medians that
the calibration tests and `docs/simulator.md` compare with the real runs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from kvoffload_exporter.sim.calibration import Calibration


@dataclass(frozen=True)
class RequestTiming:
    """Durations in seconds of one request, split the way vLLM reports them."""

    frontend_s: float  # outside the engine: HTTP, tokenisation, SSE (client TTFT only)
    queue_s: float  # arrival → scheduled; includes the asynchronous CPU-tier load
    engine_ttft_s: float  # scheduled → first token (the response's metrics.time_to_first_token_ms)
    load_s: float  # what kv_offload_load_time reports for this request's load (0 without one)
    itl_s: float  # one decode step

    @property
    def prom_ttft_s(self) -> float:
        """vllm:time_to_first_token_seconds: engine arrival → first token, queue included."""
        return self.queue_s + self.engine_ttft_s

    @property
    def client_ttft_s(self) -> float:
        return self.frontend_s + self.prom_ttft_s


class TimeModel:
    """Durations for requests on one engine; `slow_load` divides the load bandwidth (fault)."""

    def __init__(self, cal: Calibration, rng: random.Random | None = None, noise: bool = True):
        self.cal = cal
        self.rng = rng or random.Random(0)
        self.noise = noise
        self.slow_load = 1.0

    def _jitter_ms(self) -> float:
        # Right-skewed with median 0 and floor −jitter_ms, like the real TTFT spread (p25–p75 ±5 ms).
        if not self.noise or self.cal.jitter_ms <= 0:
            return 0.0
        return self.cal.jitter_ms * (self.rng.lognormvariate(0.0, self.cal.jitter_sigma) - 1.0)

    def _spread(self, value: float, sigma: float = 0.05) -> float:
        return value * self.rng.lognormvariate(0.0, sigma) if self.noise else value

    def transfer_seconds(self, nbytes: int, gbps: float) -> float:
        return self._spread(nbytes / (gbps * 1e9)) if nbytes > 0 else 0.0

    def load_seconds(self, nbytes: int) -> float:
        return self.transfer_seconds(nbytes, self.cal.load_gbps / self.slow_load)

    def store_seconds(self, nbytes: int) -> float:
        return self.transfer_seconds(nbytes, self.cal.store_gbps)

    def lookup_seconds(self) -> float:
        return self._spread(self.cal.lookup_us * 1e-6, 0.3)

    def request(self, computed_tokens: int, load_bytes: int, connector: bool) -> RequestTiming:
        """Timing of one request that prefills `computed_tokens` after loading `load_bytes`."""
        c = self.cal
        load_s = self.load_seconds(load_bytes)
        queue_ms = c.queue_ms + ((load_s * 1e3 + c.load_queue_ms) if load_bytes > 0 else 0.0)
        engine_ms = (
            c.step_ms
            + c.prefill_ms_per_token * computed_tokens
            + (c.connector_ms if connector else 0.0)
            + (c.load_step_ms if load_bytes > 0 else 0.0)
        )
        engine_ms = max(0.1 * engine_ms, engine_ms + self._jitter_ms())
        return RequestTiming(
            frontend_s=c.frontend_ms / 1e3,
            queue_s=queue_ms / 1e3,
            engine_ttft_s=engine_ms / 1e3,
            load_s=load_s,
            itl_s=c.itl_ms / 1e3,
        )


def expected_client_ttft_ms(cal: Calibration, computed_tokens: int, load_bytes: int, connector: bool) -> float:
    """Noise-free client TTFT of one request on an idle engine (calibration tables and tests)."""
    return TimeModel(cal, noise=False).request(computed_tokens, load_bytes, connector).client_ttft_s * 1e3
