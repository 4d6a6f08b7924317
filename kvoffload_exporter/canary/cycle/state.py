"""What is exported and reported about one target's canary (samples, counters, verdict); pure."""

from __future__ import annotations

from collections import Counter, deque

from kvoffload_exporter.canary.config import CanarySettings
from kvoffload_exporter.canary.cycle.order import Orders
from kvoffload_exporter.canary.cycle.outputcheck import OutputCheck
from kvoffload_exporter.canary.cycle.records import CycleRecord
from kvoffload_exporter.canary.cycle.sequential import Design
from kvoffload_exporter.canary.cycle.stats import Verdict, decide, median
from kvoffload_exporter.canary.types import CycleReason, LoadBand, Tier
from kvoffload_exporter.catalogue import CANARY_PATHS
from kvoffload_exporter.derive.reasons import CanaryFacts
from kvoffload_exporter.enums import OutputResult


class CanaryState:
    """Everything exported and reported about one target's canary; updated after every cycle."""

    def __init__(self, label: str, settings: CanarySettings, max_samples: int | None = None):
        self.label = label
        self.settings = settings
        maxlen = max_samples if max_samples is not None else settings.max_samples
        self.samples: dict[str, deque[float]] = {p: deque(maxlen=maxlen) for p in CANARY_PATHS}
        self.probes: Counter[str] = Counter()  # ProbeResult values
        # Every counted TTFT since start, per path: the summary's _count/_sum only ever grow (rate() works).
        self.ttft_count: Counter[str] = Counter()
        self.ttft_sum: dict[str, float] = {}
        self.cycles: Counter[str] = Counter()  # CycleReason values
        self.offload_attempts = 0
        self.offload_hits_seen = 0
        self.last_success: float | None = None
        self.verdict: Verdict | None = None
        self.design: Design | None = None  # check: the sequential design its verdict is decided with
        self.residency: dict[Tier, float] = {}  # longest idle seconds still a hit (wait strategy)
        # (idle seconds, loaded from the tier) of the last displaced wait-ladder revisits: the horizon
        # follows the workload (a lifetime maximum, like residency, never comes down again).
        self.tier_revisits: deque[tuple[float, bool]] = deque(maxlen=maxlen)
        # serve --canary.enabled: TTFT samples, cycles and the verdict per load band (schedule.py records the load).
        self.band_samples: dict[LoadBand, dict[str, deque[float]]] = {
            b: {p: deque(maxlen=maxlen) for p in CANARY_PATHS} for b in LoadBand
        }
        self.band_cycles: Counter[str] = Counter()
        self.band_verdicts: dict[LoadBand, Verdict] = {}
        self.load_band: LoadBand | None = None  # the band of the last cycle with a known load
        self.recompute_control = "unknown"  # unknown | honoured | ignored | no_connector | off
        self.bytes_per_token: float | None = None
        self._bpt_candidates: list[float] = []
        self.tokens_spent = 0
        self.budget_remaining: float | None = None
        # Failure is data: failed requests, preparations and cycles by closed reason, the canary's
        # health (1: running and its last cycle or preparation succeeded) and its task's restarts.
        self.errors: Counter[str] = Counter()  # ErrorReason values
        self.up = True
        self.restarts = 0
        self.orders = Orders(settings.seed)  # each round's probe order (order.py)
        self.output = OutputCheck()  # offload hit vs GPU hit vs recompute answers (outputcheck.py)

    def observe(self, path: str, ttft: float) -> None:
        """A counted TTFT: into the rolling samples (quantiles, verdict) and the cumulative count and sum."""
        self.samples[path].append(ttft)
        self.ttft_count[path] += 1
        self.ttft_sum[path] = self.ttft_sum.get(path, 0.0) + ttft

    def learn_bytes_per_token(self, store_bytes: float, own_tokens: int, other_tokens: float) -> None:
        """Stored bytes over every prompt token that could have caused them: exact in a quiet window,
        a lower bound under traffic (never above the truth, so a real full load always "covers" the
        prefix; whether the hit was full at all comes from the request's own cached_tokens)."""
        self._bpt_candidates.append(store_bytes / (own_tokens + other_tokens))
        self.bytes_per_token = median(self._bpt_candidates[-25:])  # robust to one late-reported store

    def retention_seconds(self) -> float | None:
        """The largest idle time after which a displaced canary prefix still loaded from the tier, over
        the recent wait-ladder revisits; None until one did (a tier that only misses has no horizon)."""
        return max((idle for idle, loaded in self.tier_revisits if loaded), default=None)

    def reason_facts(self) -> CanaryFacts:
        """What the state reasons (kvoffload_exporter/derive/reasons.py) may use from this canary."""
        return CanaryFacts(
            no_load_cycles=self.cycles[CycleReason.NO_LOAD],
            evicted_from_tier_cycles=self.cycles[CycleReason.EVICTED_FROM_TIER],
            retention_seconds=self.retention_seconds(),
        )

    def record_load(self, rec: CycleRecord) -> None:
        """File a finished cycle's counted TTFTs under its load band and re-decide that band's verdict."""
        if rec.load is None or rec.reason == CycleReason.ERROR:
            return
        band = rec.load.band
        self.load_band = band
        self.band_cycles[band] += 1
        for ph in rec.phases:
            if ph.counted and ph.ttft_seconds is not None and ph.path in self.band_samples[band]:
                self.band_samples[band][ph.path].append(ph.ttft_seconds)
        s = self.settings
        self.band_verdicts[band] = decide(
            {k: list(v) for k, v in self.band_samples[band].items()},
            self.band_cycles[band],
            min_samples=s.min_samples,
            confidence=s.confidence,
        )

    @property
    def decided(self) -> bool:
        """The verdict is a speed decision (check stops its rounds there)."""
        return self.verdict is not None and self.verdict.verdict in ("offload_faster", "offload_slower")

    @property
    def mismatch_confirmed(self) -> bool:
        """An offload hit answered other tokens, confirmed (sensitive prompt, references agreeing): check ends."""
        return self.output.result == OutputResult.MISMATCH

    def uses_recompute(self) -> bool:
        """The recompute control runs while it is configured and not proven ignored by the server."""
        return self.settings.recompute_control and self.recompute_control not in ("ignored", "off")

    def recompute(self) -> Verdict:
        s = self.settings
        self.verdict = decide(
            {k: list(v) for k, v in self.samples.items()},
            self.offload_attempts,
            min_samples=s.min_samples,
            confidence=s.confidence,
            design=self.design,
        )
        return self.verdict
