"""The recompute pair decides only while the engine answers alike from its own cache and recomputed.

Why: on an H200 (Qwen3-0.6B shape, seeded random weights, 4,096-token prompts) the same prompt answered
other greedy tokens from the GPU prefix cache than recomputed in 20 of 20 prompts, with no connector at
all; an exact offload-vs-recompute comparison would have called a healthy tier `output_mismatch`.
"""

from __future__ import annotations

from kvoffload_exporter.canary.cycle.outputcheck import OutputCheck, output_line
from kvoffload_exporter.enums import OutputPair, OutputResult

GPU, RECOMPUTED, OTHER = [1, 2, 3], [9, 8, 7], [5, 5, 5]


def _sensitive() -> OutputCheck:
    out = OutputCheck()
    out.sense(1, RECOMPUTED, OTHER, [0, 2, 4, 6])
    return out


def test_an_engine_whose_cache_changes_its_answer_makes_the_recompute_pair_unverifiable() -> None:
    out = _sensitive()
    assert out.calibrate(GPU, RECOMPUTED) is False
    assert out.add(1, OutputPair.OFFLOAD_VS_GPU, GPU, GPU).result == OutputResult.EQUAL
    assert out.add(1, OutputPair.OFFLOAD_VS_RECOMPUTE, GPU, RECOMPUTED).result == OutputResult.UNVERIFIABLE
    d = out.as_dict()
    assert d["result"] == "equal" and d["mismatched"] == 0 and d["compared"] == 1 and d["unverifiable"] == 1
    assert d["recompute_reference"] == {"checked": 1, "agreed": 0, "decides": False}
    assert "vs recompute unverifiable" in output_line(d)


def test_the_offload_vs_gpu_pair_still_catches_a_corrupting_tier_on_such_an_engine() -> None:
    out = _sensitive()
    out.calibrate(GPU, RECOMPUTED)
    out.reproduce(GPU, GPU)  # a second GPU hit of the same prompt answered alike: the GPU answer is reproducible
    assert out.add(1, OutputPair.OFFLOAD_VS_GPU, OTHER, GPU).result == OutputResult.MISMATCH
    assert out.as_dict()["result"] == "mismatch"


def test_a_difference_without_a_reproduced_gpu_answer_is_unverifiable_never_a_mismatch() -> None:
    out = _sensitive()
    assert out.add(1, OutputPair.OFFLOAD_VS_GPU, OTHER, GPU).result == OutputResult.UNVERIFIABLE
    out.reproduce(GPU, OTHER)  # the engine's own GPU hits disagree: random ids, or drift
    assert out.add(2, OutputPair.OFFLOAD_VS_GPU, OTHER, GPU).result == OutputResult.UNVERIFIABLE
    d = out.as_dict()
    assert d["mismatched"] == 0 and d["gpu_reference"] == {"checked": 1, "agreed": 0, "decides": False}
    assert "two GPU hits of the same prompt answered differently" in output_line(d)


def test_an_engine_that_answers_alike_lets_the_recompute_pair_decide() -> None:
    out = _sensitive()
    assert out.calibrate(RECOMPUTED, RECOMPUTED) is True
    assert out.add(1, OutputPair.OFFLOAD_VS_RECOMPUTE, OTHER, RECOMPUTED).result == OutputResult.MISMATCH
    assert out.as_dict()["recompute_reference"]["decides"] is True


def test_one_disagreeing_cycle_ends_the_recompute_pair_for_the_run() -> None:
    out = _sensitive()
    out.calibrate(RECOMPUTED, RECOMPUTED)
    out.calibrate(GPU, RECOMPUTED)
    assert out.add(3, OutputPair.OFFLOAD_VS_RECOMPUTE, OTHER, RECOMPUTED).result == OutputResult.UNVERIFIABLE


def test_without_any_cached_versus_recomputed_check_the_recompute_pair_does_not_decide() -> None:
    out = _sensitive()
    assert out.add(1, OutputPair.OFFLOAD_VS_RECOMPUTE, OTHER, RECOMPUTED).result == OutputResult.UNVERIFIABLE


def test_the_sensitivity_probe_changes_tokens_across_the_whole_prefix() -> None:
    """One changed token left the answer of 24 of 300 prompts unchanged on a real engine (outputcheck.py): the
    probe changes CHANGED tokens spread over the prefix, each to another id of the range, and nothing else."""
    from kvoffload_exporter.canary.cycle.outputcheck import CHANGED, changed_positions, changed_prefix

    prefix = list(range(1000, 1256))
    probe = changed_prefix(prefix, 1000, 1256)
    moved = [i for i, (a, b) in enumerate(zip(prefix, probe, strict=True)) if a != b]
    assert moved == changed_positions(len(prefix)) == [i * 32 for i in range(CHANGED)]
    assert all(1000 <= t < 1256 for t in probe)  # the last id wraps to the range's start
    assert changed_positions(3) == [0, 1, 2] and changed_positions(0) == []
