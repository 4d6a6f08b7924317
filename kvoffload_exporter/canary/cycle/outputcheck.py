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
answers from the last token only). So one sensitivity probe per run sends the same prompt with its first
prefix token changed, recomputed: if its answer equals the reference, the check cannot see a corrupted
prefix, and every comparison is `unverifiable` (reported, never counted equal, never a mismatch).
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
    "offload_vs_gpu: every token id identical; offload_vs_recompute: every token id identical, and only while "
    "the engine's GPU-cached answer equals its recomputed one (recompute_reference), else unverifiable"
)
MAX_PAIRS = 1000
"""Comparisons kept for the report and the evidence (the counters keep counting past it)."""


def changed_prefix(prefix: Sequence[int], lo: int, hi: int) -> list[int]:
    """The sensitivity probe's prefix: the first token replaced by another id of the range [lo, hi)."""
    first = prefix[0] + 1 if prefix[0] + 1 < hi else lo
    return [first, *prefix[1:]]


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
    """The sensitivity probe: the reference answer and the answer with the first prefix token changed."""

    cycle: int
    changed_position: int
    reference_token_ids: list[int]
    probe_token_ids: list[int]


class PairCount(TypedDict):
    compared: int
    mismatched: int


class RecomputeReference(TypedDict):
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

    def calibrate(self, gpu: Sequence[int], recompute: Sequence[int]) -> bool:
        """The engine's own cached answer against its recomputed one (no tier involved); returns agreement."""
        agreed = bool(gpu) and list(gpu) == list(recompute)
        self.reference_checked += 1
        self.reference_agreed += agreed
        return agreed

    @property
    def recompute_decides(self) -> bool:
        """The recompute pair decides only while every cached-vs-recomputed check of the run agreed."""
        return self.reference_checked > 0 and self.reference_agreed == self.reference_checked

    def sense(self, cycle: int, reference: Sequence[int], probe: Sequence[int]) -> None:
        """The sensitivity probe's answer against the reference answer of the unchanged prompt."""
        self.sensitive = bool(probe) and list(probe) != list(reference)
        self.sensitivity = {
            "cycle": cycle,
            "changed_position": 0,
            "reference_token_ids": list(reference),
            "probe_token_ids": list(probe),
        }

    def add(self, cycle: int, pair: OutputPair, offload: Sequence[int], reference: Sequence[int]) -> PairRecord:
        if not self.sensitive or (pair == OutputPair.OFFLOAD_VS_RECOMPUTE and not self.recompute_decides):
            result = OutputResult.UNVERIFIABLE
            self.unverifiable += 1
        else:
            result = OutputResult.EQUAL if same(pair, offload, reference) else OutputResult.MISMATCH
            self.compared[pair] += 1
            self.mismatched[pair] += result == OutputResult.MISMATCH
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
            "pairs": [p.as_dict() for p in self.pairs],
        }


def output_line(d: OutputCheckDoc) -> str:
    """The report's `output:` line from an `output_check` object."""
    result = d.get("result")
    if result == OutputResult.NONE:
        return "output: nothing compared (no offload hit with token ids)"
    if result == OutputResult.UNVERIFIABLE:
        return (
            f"output: unverifiable - {d.get('unverifiable')} comparisons, but the answer did not change when the "
            "first prefix token did (sensitive: false): this model cannot show a corrupted prefix"
        )
    ref = d.get("recompute_reference")
    line = (
        f"output: {result} - {d.get('mismatched')} of {d.get('compared')} comparisons differ "
        f"(offload hit vs GPU hit and vs recompute, {d.get('method')})"
    )
    if ref and ref.get("checked") and not ref.get("decides"):
        line += (
            f"; vs recompute unverifiable: this engine's GPU-cached answer differed from its recomputed one in "
            f"{ref['checked'] - ref.get('agreed', 0)} of {ref['checked']} cycles without the tier"
        )
    return line


__all__ = [
    "MAX_PAIRS",
    "METHOD",
    "TOLERANCE",
    "OutputCheck",
    "OutputCheckDoc",
    "PairDoc",
    "PairRecord",
    "Sensitivity",
    "changed_prefix",
    "output_line",
    "same",
]
