"""The output check: does a request served from the tier get the same answer as the same prompt served
from the GPU prefix cache, and as the same prompt recomputed? Pure.

Why: a tier that makes answers wrong is worse than one that is slow, and no latency panel shows it. Every
cycle already sends one prompt (prefix A + the cycle's tail) three ways: the GPU revisit (`gpu_hit`), the
displaced revisit (`offload_hit`) and the cold control (a fresh salt: every token recomputed). Greedy
decoding (temperature 0, a fixed seed) makes their generated token ids comparable:

- `offload_vs_gpu`: both read cached KV through the same attention path, so the ids must be identical;
- `offload_vs_recompute`: numerics of a cached and a recomputed prefix may differ slightly, so the first
  token must be identical and the rest within the tolerance. Without logprobs (the canary does not ask
  for them: a server started with `--skip-tokenizer-init` refuses them) the tolerance is zero: every id
  must be identical (TOLERANCE).

Equal answers prove nothing if the answer does not depend on the prefix (a model with dummy weights
answers from the last token only). So one sensitivity probe per run sends the same prompt with its first
prefix token changed, recomputed: if its answer equals the reference, the check cannot see a corrupted
prefix, and every comparison is `unverifiable` (reported, never counted equal, never a mismatch).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvoffload_exporter.enums import OutputPair, OutputResult

METHOD = "greedy_token_ids"
"""How answers are compared: the generated token ids of greedy requests (`return_token_ids`)."""
TOLERANCE = (
    "offload_vs_gpu: every token id identical; offload_vs_recompute: the first token id identical and the "
    "rest identical too (no logprobs are requested, so no numeric tolerance applies)"
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

    def as_dict(self) -> dict[str, Any]:
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
        self.sensitivity: dict[str, Any] | None = None
        self.pairs: deque[PairRecord] = deque(maxlen=MAX_PAIRS)

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
        if not self.sensitive:
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
        if self.unverifiable:
            return OutputResult.UNVERIFIABLE
        return OutputResult.EQUAL if sum(self.compared.values()) else OutputResult.NONE

    def as_dict(self) -> dict[str, Any]:
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
            "pairs": [p.as_dict() for p in self.pairs],
        }


def output_line(d: Mapping[str, Any]) -> str:
    """The report's `output:` line from an `output_check` object."""
    result = d.get("result")
    if result == OutputResult.NONE:
        return "output: nothing compared (no offload hit with token ids)"
    if result == OutputResult.UNVERIFIABLE:
        return (
            f"output: unverifiable - {d.get('unverifiable')} comparisons, but the answer did not change when the "
            "first prefix token did (sensitive: false): this model cannot show a corrupted prefix"
        )
    return (
        f"output: {result} - {d.get('mismatched')} of {d.get('compared')} comparisons differ "
        f"(offload hit vs GPU hit and vs recompute, {d.get('method')})"
    )


__all__ = ["MAX_PAIRS", "METHOD", "TOLERANCE", "OutputCheck", "PairRecord", "changed_prefix", "output_line", "same"]
