"""Replays of poll sequences through advance/derive as the poller runs them: gaps, warm-up, restarts.

Every sequence used to show a wrong state on main: `idle` for a whole window while loads happened
after a gap, and `store_without_load` (the state we alert on) while the tier was still filling.
"""

from __future__ import annotations

from collections import deque

from kvoffload_exporter.derive import window as derive
from kvoffload_exporter.ingest.normalise import normalise

KEY = ("m", "0")
POLL = 10.0
WINDOW = 60.0


def expo(load: float, store: float, hits: float, offload: bool = True) -> str:
    lb = 'engine="0",model_name="m"'
    lines = [f"vllm:prefix_cache_queries_total{{{lb}}} {hits * 2}", f"vllm:prefix_cache_hits_total{{{lb}}} {hits}"]
    if offload:
        lines += [
            f"vllm:kv_offload_load_bytes_total{{{lb}}} {load}",
            f"vllm:kv_offload_store_bytes_total{{{lb}}} {store}",
        ]
    return "\n".join(lines) + "\n"


def replay(polls: list[tuple[float, str]]) -> list[tuple[float, str | None]]:
    """(t, body) per successful poll → (t, state) as the exporter would publish after each (None: no
    state, the engine has one sample only)."""
    history: deque[derive.Point] = deque(maxlen=int(WINDOW / POLL) + 3)
    out: list[tuple[float, str | None]] = []
    for t, body in polls:
        point = derive.advance(history[-1] if history else None, normalise(body), t)
        d = derive.derive([*history, point], t, WINDOW).get(KEY)
        out.append((t, d.state if d is not None else None))
        history.append(point)
    return out


def steady(t0: float, n: int, load0: float = 0.0, store0: float = 0.0, hits0: float = 0.0) -> list[tuple[float, str]]:
    """n polls of a tier that serves loads: every poll stores, loads and hits more."""
    return [(t0 + i * POLL, expo(load0 + 100 * i, store0 + 100 * i, hits0 + 10 * i)) for i in range(n)]


def test_offload_families_gap_is_not_a_reset_to_zero() -> None:
    before = steady(0.0, 10, 1000, 1000, 100)
    gap = [(100.0 + i * POLL, expo(0, 0, 200 + i, offload=False)) for i in range(10)]
    # The families come back with the counters the engine kept while they were hidden.
    after = steady(200.0, 12, 5000, 5000, 300)
    states = replay(before + gap + after)
    assert {s for t, s in states if t >= 200.0} == {"hit"}
    assert {s for t, s in states if 100.0 <= t < 200.0} == {"not_configured"}


def test_offload_families_gap_with_restarted_counters_is_hit_when_loads_happen() -> None:
    before = steady(1000.0, 10, 10_000, 10_000, 1000)
    gap = [(1100.0 + i * POLL, expo(0, 0, 1000, offload=False)) for i in range(10)]
    after = steady(1200.0, 12, 50, 50, 1000)  # the connector came back with an engine restart
    states = replay(before + gap + after)
    assert {s for t, s in states if t >= 1200.0} == {"hit"}


def test_outage_longer_than_the_window_compares_the_polls_on_each_side() -> None:
    before = steady(0.0, 10)
    after = steady(1000.0, 3, 5000, 5000, 500)  # nothing answered for 900 s, loads meanwhile
    pts: deque[derive.Point] = deque(maxlen=int(WINDOW / POLL) + 3)
    for t, body in before + after[:1]:
        point = derive.advance(pts[-1] if pts else None, normalise(body), t)
        pts.append(point)
    d = derive.derive(list(pts), 1000.0, WINDOW)[KEY]
    assert d.state == "hit" and d.window_seconds == 910.0
    assert d.deltas["offload_load_bytes"] == 5000 - 900
    assert [s for _, s in replay(before + after)][-3:] == ["hit", "hit", "hit"]


def warm_up(t0: float, n: int, hits0: float = 0.0) -> list[tuple[float, str]]:
    """Engine start under traffic: prompts repeat (GPU prefix hits), the tier fills, nothing is
    evicted yet so nothing is loaded."""
    return [(t0 + i * POLL, expo(0, 100 * (i + 1), hits0 + 10 * i)) for i in range(n)]


def test_warm_up_is_storing_never_store_without_load() -> None:
    seq = warm_up(0.0, 6)  # the first window of an engine (and of the exporter)
    seq += [(60.0 + i * POLL, expo(100 * (i + 1), 600 + 100 * i, 60 + 10 * i)) for i in range(10)]
    states = [s for _, s in replay(seq)]
    assert "store_without_load" not in states
    assert set(states[1:6]) == {"storing"}
    assert states[-1] == "hit"


def test_after_a_counter_reset_warm_up_is_storing_again() -> None:
    seq = steady(0.0, 10, 1000, 1000, 100)
    seq += warm_up(100.0, 6, hits0=0)  # restart: counters drop, the new tier fills
    after = [s for t, s in replay(seq) if t >= 100.0]
    assert "store_without_load" not in after
    assert after[-1] == "storing"  # once the pre-restart loads have left the window


def test_store_without_load_only_once_the_stores_are_a_window_old() -> None:
    seq = warm_up(0.0, 20)  # stores and reuse for 200 s, never a load
    states = [s for _, s in replay(seq)]
    assert states[-1] == "store_without_load"
    assert set(states[1:6]) == {"storing"}  # not before the first stores are a window old


def test_a_backend_counter_going_down_alone_is_a_restart() -> None:
    """Why: the evidence half of the restart check could be removed with every test green. A backend
    (SimpleCPU blocks) restarted while the vLLM counters kept rising: its new count is what it did since,
    not a drop to read as zero."""
    from kvoffload_exporter.enums import Generation, Signal
    from kvoffload_exporter.ingest.backends.schema import Evidence, EvidenceKey, NativeUnit
    from kvoffload_exporter.ingest.snapshot import EngineSignals, Snapshot

    stored = EvidenceKey(Evidence.STORED, NativeUnit.BLOCKS)

    def snap(prompts: float, blocks: float) -> Snapshot:
        e = EngineSignals("m", "0", {Signal.PROMPT_TOKENS: prompts}, evidence={stored: blocks})
        return Snapshot(Generation.NONE, (e,))

    p0 = derive.advance(None, snap(1000.0, 500.0), 0.0)
    p1 = derive.advance(p0, snap(2000.0, 40.0), POLL)  # 40 blocks stored since the backend restarted
    assert p1.totals[KEY].evidence[stored] == 540.0
    assert derive.compare(p0, p1, KEY).evidence[stored] == 40.0
