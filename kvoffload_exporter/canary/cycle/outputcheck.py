"""The output check: does a request served from the tier get the same answer as the same prompt served
from the GPU prefix cache, and as the same prompt recomputed? Pure.

Why: a tier that makes answers wrong is worse than one that is slow, and no latency panel shows it. Every
cycle already sends one prompt (prefix A + the cycle's tail) three ways: the GPU revisit (`gpu_hit`), the
displaced revisit (`offload_hit`) and the cold control (a fresh salt: every token recomputed). Greedy
decoding (temperature 0, a fixed seed) makes their generated token ids comparable:

- `offload_vs_gpu`: both read cached KV through the same attention path, so the ids must be identical;
- `offload_vs_recompute`: numerics of a cached and a recomputed prefix may differ, and on some engines
  they change the greedy answer by themselves (measured on an H200: 20 of 20 prompts answered otherwise
  from the GPU prefix cache than recomputed, with no connector at all). So this pair decides only while
  the engine's own cached answer (the GPU revisit) equals its recomputed one: every cycle that has both
  checks that for free (`recompute_reference`); where they differ, the pair is `unverifiable`. Where it
  decides, every id must be identical: without logprobs (a server started with `--skip-tokenizer-init`
  refuses them) there is nothing to measure a numeric slack on (TOLERANCE).

Equal answers prove nothing if the answer does not depend on the prefix (a model with dummy weights
answers from the last token only). So one sensitivity probe per run sends the same prompt with eight
prefix tokens changed (CHANGED: the first and one each eighth of the prefix further, as a corrupted load
changes KV across the prefix, not at one position), recomputed: if its answer equals the reference, the check
cannot see a corrupted prefix, and every comparison is `unverifiable` (reported, never counted equal, never
a mismatch). One token was too weak a probe: on vLLM's CPU engine with seeded random weights (264-token
prompts, 8 greedy tokens) changing the first token changed the answer of 276 of 300 prompts (one healthy run
in twelve read `unverifiable`), four a quarter apart 298 of 300, eight an eighth apart 300 of 300.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

from kvoffload_exporter.enums import OutputPair, OutputResult

METHOD = "greedy_token_ids"
"""How answers are compared: the generated token ids of greedy requests (`return_token_ids`)."""
TOLERANCE = (
    "offload_vs_gpu: every token id identical, and only while the engine answers the same prompt alike from two "
    "GPU hits that no tier touched (gpu_reference); offload_vs_recompute: every token id identical, and only while "
    "the engine's GPU-cached answer equals its recomputed one (recompute_reference), else unverifiable"
)
CORRUPT_SHARE = 0.05
"""The corruption rate the report states its power for: P(a run sees one) = 1 - (1 - 5 %)^(answers served by a load)."""
MAX_PAIRS = 1000
"""Comparisons kept for the report and the evidence (the counters keep counting past it)."""


CHANGED = 8
"""Prefix tokens the sensitivity probe changes: the first, and one each eighth of the prefix further."""


def changed_positions(length: int) -> list[int]:
    """Where the sensitivity probe changes a prefix of `length` tokens: i·length/CHANGED for i < CHANGED
    (fewer, distinct, for a prefix shorter than CHANGED)."""
    return sorted({i * length // CHANGED for i in range(CHANGED)}) if length > 0 else []


def changed_prefix(prefix: Sequence[int], lo: int, hi: int) -> list[int]:
    """The sensitivity probe's prefix: the tokens at `changed_positions` replaced by another id of [lo, hi)."""
    out = list(prefix)
    for i in changed_positions(len(out)):
        out[i] = out[i] + 1 if out[i] + 1 < hi else lo
    return out


def same(pair: OutputPair, offload: Sequence[int], reference: Sequence[int]) -> bool:
    """Whether two answers agree under the pair's tolerance (TOLERANCE)."""
    if pair == OutputPair.OFFLOAD_VS_RECOMPUTE and (not offload or not reference or offload[0] != reference[0]):
        return False  # the first token is always exact
    return list(offload) == list(reference)


class PairDoc(TypedDict):
    """One comparison in `output_check.pairs`."""

    cycle: int
    pair: str
    equal: bool
    result: str
    offload_token_ids: list[int]
    reference_token_ids: list[int]


class Sensitivity(TypedDict):
    """The sensitivity probe: the reference answer and the answer with the prefix tokens at
    `changed_positions` changed (`changed_position`: the first of them, always 0)."""

    cycle: int
    changed_position: int
    changed_positions: list[int]
    reference_token_ids: list[int]
    probe_token_ids: list[int]


class PairCount(TypedDict):
    compared: int
    mismatched: int


class RecomputeReference(TypedDict):
    checked: int
    agreed: int
    decides: bool


class GpuReference(TypedDict):
    """`output_check.gpu_reference`: the engine's GPU hit against a second GPU hit of the same prompt."""

    checked: int
    agreed: int
    decides: bool


class OutputCheckDoc(TypedDict):
    """`output_check` of the check document (`OutputCheck.as_dict`)."""

    result: str
    compared: int
    mismatched: int
    unverifiable: int
    by_pair: dict[str, PairCount]
    method: str
    tolerance: str
    sensitive: bool
    sensitivity: Sensitivity | None
    recompute_reference: RecomputeReference
    gpu_reference: GpuReference
    served_by_load: int
    detect_at_5pct: float
    pairs: list[PairDoc]


@dataclass(frozen=True)
class PairRecord:
    """One comparison: token ids of both sides (never the prompt, which may be sensitive)."""

    cycle: int
    pair: OutputPair
    result: OutputResult
    offload_token_ids: tuple[int, ...]
    reference_token_ids: tuple[int, ...]

    @property
    def equal(self) -> bool:
        return self.offload_token_ids == self.reference_token_ids

    def as_dict(self) -> PairDoc:
        return {
            "cycle": self.cycle,
            "pair": str(self.pair),
            "equal": self.equal,
            "result": str(self.result),
            "offload_token_ids": list(self.offload_token_ids),
            "reference_token_ids": list(self.reference_token_ids),
        }


class OutputCheck:
    """Comparisons of one target's canary since start; `sensitive` is None until the sensitivity probe ran."""

    def __init__(self) -> None:
        self.compared: Counter[OutputPair] = Counter()  # verifiable comparisons
        self.mismatched: Counter[OutputPair] = Counter()
        self.unverifiable = 0
        self.sensitive: bool | None = None
        self.sensitivity: Sensitivity | None = None
        self.pairs: deque[PairRecord] = deque(maxlen=MAX_PAIRS)
        self.reference_checked = 0  # cycles with both a GPU-cached and a recomputed answer of one prompt
        self.reference_agreed = 0
        self.gpu_checked = 0  # cycles with a GPU hit and a second, later GPU hit of the same prompt
        self.gpu_agreed = 0
        self.served_by_load = 0  # distinct offload answers compared (decided) that a load from the tier served
        self._loaded_cycles: set[int] = set()

    def calibrate(self, gpu: Sequence[int], recompute: Sequence[int]) -> bool:
        """The engine's own cached answer against its recomputed one (no tier involved); returns agreement."""
        agreed = bool(gpu) and list(gpu) == list(recompute)
        self.reference_checked += 1
        self.reference_agreed += agreed
        return agreed

    def reproduce(self, first: Sequence[int], second: Sequence[int]) -> bool:
        """The engine's GPU hit against a second GPU hit of the same prompt from KV no tier touched, sent after
        the offload revisit of a cycle whose offload answer differed from the GPU's: a server whose ids are
        random, or whose answers drift, fails it. Returns agreement."""
        agreed = bool(first) and list(first) == list(second)
        self.gpu_checked += 1
        self.gpu_agreed += agreed
        return agreed

    @property
    def gpu_decides(self) -> bool:
        """A GPU pair's difference decides only while every GPU-vs-GPU check of the run agreed."""
        return self.gpu_checked > 0 and self.gpu_agreed == self.gpu_checked

    def decides(self, pair: OutputPair) -> bool:
        """Whether the engine answered this pair's reference reproducibly without the tier, so far."""
        return self.gpu_decides if pair == OutputPair.OFFLOAD_VS_GPU else self.recompute_decides

    @property
    def recompute_decides(self) -> bool:
        """The recompute pair decides only while every cached-vs-recomputed check of the run agreed."""
        return self.reference_checked > 0 and self.reference_agreed == self.reference_checked

    def sense(self, cycle: int, reference: Sequence[int], probe: Sequence[int], positions: Sequence[int]) -> None:
        """The sensitivity probe's answer against the reference answer of the unchanged prompt."""
        self.sensitive = bool(probe) and list(probe) != list(reference)
        self.sensitivity = {
            "cycle": cycle,
            "changed_position": positions[0] if positions else 0,
            "changed_positions": list(positions),
            "reference_token_ids": list(reference),
            "probe_token_ids": list(probe),
        }

    def add(
        self, cycle: int, pair: OutputPair, offload: Sequence[int], reference: Sequence[int], loaded: bool = False
    ) -> PairRecord:
        """One comparison. A difference decides only while the pair's reference is reproducible without the
        tier (`decides`): else unverifiable, never a mismatch. A difference it decides is a mismatch whether or not
        the model is sensitive to its prefix (the sensitivity probe says whether `equal` means anything, not
        whether a same-prompt difference counts); an equal answer of an insensitive model proves nothing.
        `loaded`: the offload side was served by a load from the tier (`served_by_load` counts each such answer
        once: a cycle's one offload answer is compared with two references)."""
        equal = same(pair, offload, reference)
        # The GPU pair's reference is checked only where it differs (outputs.py: the second GPU hit costs a
        # request); the recompute pair's before every comparison (its calibration comes with the cycle).
        gated = pair == OutputPair.OFFLOAD_VS_RECOMPUTE or not equal
        if (gated and not self.decides(pair)) or (equal and not self.sensitive):
            result = OutputResult.UNVERIFIABLE
            self.unverifiable += 1
        else:
            result = OutputResult.EQUAL if equal else OutputResult.MISMATCH
            self.compared[pair] += 1
            self.mismatched[pair] += result == OutputResult.MISMATCH
            if loaded and cycle not in self._loaded_cycles:  # one answer, compared with each reference
                self._loaded_cycles.add(cycle)
                self.served_by_load += 1
        rec = PairRecord(cycle, pair, result, tuple(offload), tuple(reference))
        self.pairs.append(rec)
        return rec

    @property
    def result(self) -> OutputResult:
        if sum(self.mismatched.values()):
            return OutputResult.MISMATCH
        if sum(self.compared.values()):
            return OutputResult.EQUAL  # what could be compared agreed; the rest is counted as unverifiable
        return OutputResult.UNVERIFIABLE if self.unverifiable else OutputResult.NONE

    def as_dict(self) -> OutputCheckDoc:
        """`check`'s `output_check` object."""
        return {
            "result": str(self.result),
            "compared": sum(self.compared.values()),
            "mismatched": sum(self.mismatched.values()),
            "unverifiable": self.unverifiable,
            "by_pair": {str(p): {"compared": self.compared[p], "mismatched": self.mismatched[p]} for p in OutputPair},
            "method": METHOD,
            "tolerance": TOLERANCE,
            "sensitive": bool(self.sensitive),
            "sensitivity": self.sensitivity,
            "recompute_reference": {
                "checked": self.reference_checked,
                "agreed": self.reference_agreed,
                "decides": self.recompute_decides,
            },
            "gpu_reference": {"checked": self.gpu_checked, "agreed": self.gpu_agreed, "decides": self.gpu_decides},
            "served_by_load": self.served_by_load,
            "detect_at_5pct": round(1.0 - (1.0 - CORRUPT_SHARE) ** self.served_by_load, 4),
            "pairs": [p.as_dict() for p in self.pairs],
        }


def _unreproducible(d: OutputCheckDoc) -> str:
    """Which references the engine did not reproduce without the tier ("" when both did)."""
    out = []
    gpu, ref = d.get("gpu_reference"), d.get("recompute_reference")
    if gpu and gpu.get("checked") and not gpu.get("decides"):
        out.append(
            f"vs GPU unverifiable: two GPU hits of the same prompt answered differently in "
            f"{gpu['checked'] - gpu.get('agreed', 0)} of {gpu['checked']} cycles without the tier"
        )
    if ref and ref.get("checked") and not ref.get("decides"):
        out.append(
            f"vs recompute unverifiable: this engine's GPU-cached answer differed from its recomputed one in "
            f"{ref['checked'] - ref.get('agreed', 0)} of {ref['checked']} cycles without the tier"
        )
    return "; ".join(out)


def _power(d: OutputCheckDoc) -> str:
    n = d.get("served_by_load", 0)
    return (
        f"{n} offload answers compared were served by a load from the tier: a tier corrupting "
        f"{CORRUPT_SHARE:.0%} of loads shows in a run like this with probability {d.get('detect_at_5pct', 0.0):.0%}"
    )


def output_line(d: OutputCheckDoc) -> str:
    """The report's `output:` line from an `output_check` object."""
    result = d.get("result")
    if result == OutputResult.NONE:
        return "output: nothing compared (no offload hit with token ids)"
    why = _unreproducible(d)
    if result == OutputResult.UNVERIFIABLE:
        if why:
            return f"output: unverifiable - {d.get('unverifiable')} comparisons: {why}; the tier is not blamed"
        return (
            f"output: unverifiable - {d.get('unverifiable')} comparisons, all equal, but the answer did not change "
            f"when {CHANGED} prefix tokens did (sensitive: false): equal answers cannot show a corrupted prefix"
        )
    line = (
        f"output: {result} - {d.get('mismatched')} of {d.get('compared')} comparisons differ "
        f"(offload hit vs GPU hit and vs recompute, {d.get('method')}); {_power(d)}"
    )
    return f"{line}; {why}" if why else line


__all__ = [
    "CHANGED",
    "CORRUPT_SHARE",
    "MAX_PAIRS",
    "METHOD",
    "TOLERANCE",
    "OutputCheck",
    "OutputCheckDoc",
    "PairDoc",
    "PairRecord",
    "Sensitivity",
    "changed_positions",
    "changed_prefix",
    "output_line",
    "same",
]
