"""Counter resets per source: a restart of one endpoint resets only that endpoint's counters.

The chains are the reconstructed `lmcache-mp-0.33` fixtures (vLLM's /metrics plus the LMCache MP server's
own endpoint, read through `extra_metrics_urls`) and `native-0.33-dp2` (two data-parallel ranks). A
restarted endpoint's body is the same fixture with each counter counting only what happened since the
restart. Each test fails when the per-source logic of derive/window.py is replaced by one reset per engine.
"""

from __future__ import annotations

import re
from pathlib import Path

from kvoffload_exporter.derive.reasons import explain
from kvoffload_exporter.derive.window import EngineDerived, Point, advance, compare
from kvoffload_exporter.enums import Signal, State
from kvoffload_exporter.ingest.backends.schema import Evidence
from kvoffload_exporter.ingest.bodies import body_families, join_sources
from kvoffload_exporter.ingest.normalise import normalise
from kvoffload_exporter.ingest.snapshot import Snapshot

MP = Path(__file__).parent / "fixtures" / "reconstructed" / "lmcache-mp-0.33"
DP2 = Path(__file__).parent / "fixtures" / "reconstructed" / "native-0.33-dp2"
KEY = ("Qwen/Qwen3-0.6B", "0")
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*(?:\{[^}]*\})?) (\S+)$", re.M)


def _vllm(state: str) -> str:
    return (MP / f"{state}.prom").read_text()


def _server(state: str) -> str:
    return (MP / f"lmcache-server-{state}.prom").read_text()


def _since(body: str, base: str, match: str = "") -> str:
    """`body` as a process restarted at `base` shows it: each counter of a series containing `match`
    counts only its increase since then (gauges and info series untouched)."""
    old = dict(_SAMPLE.findall(base))

    def fix(m: re.Match[str]) -> str:
        series, value = m.group(1), m.group(2)
        counter = series.split("{")[0].endswith(("_total", "_count", "_sum", "_bucket"))
        if not counter or match not in series or series not in old:
            return m.group(0)
        return f"{series} {float(value) - float(old[series])!r}"

    return _SAMPLE.sub(fix, body)


def _snap(vllm: str, *extras: str | None) -> Snapshot:
    text, origins = join_sources(vllm, list(extras))
    return normalise(text, origins=origins)


def _chain(*snaps: Snapshot) -> Point:
    point = None
    for i, s in enumerate(snaps):
        point = advance(point, s, float(i))
    assert point is not None
    return point


def _last_interval(*snaps: Snapshot, key: tuple[str, str] = KEY) -> EngineDerived:
    before = _chain(*snaps[:-1])
    return compare(before, advance(before, snaps[-1], float(len(snaps))), key)


def _ev(d: EngineDerived, signal: Evidence) -> float:
    return sum(v for k, v in d.evidence.items() if k.signal == signal)


def test_the_lmcache_server_restarting_leaves_vllms_deltas_alone() -> None:
    # vLLM keeps running (131,072 more prompt tokens); the MP server restarted after the cold phase and
    # served the hit phase from a fresh process: its writes read 0, its reads 512 since the restart.
    restarted = _since(_server("after-hit"), _server("after-cold"))
    d = _last_interval(_snap(_vllm("after-cold"), _server("after-cold")), _snap(_vllm("after-hit"), restarted))
    assert d.deltas[Signal.PROMPT_TOKENS] == 131072.0  # one reset per engine made this 262,144
    assert d.state == State.HIT
    assert d.state_known
    assert _ev(d, Evidence.LOADED) == 512.0  # the restarted server's reads since its restart


def test_vllm_restarting_leaves_the_lmcache_servers_deltas_alone() -> None:
    # vLLM restarted (its counters count from 0 again: half the cold phase's traffic since); the MP server
    # kept running and wrote 512 more chunks. One reset per engine would add the server's raw 1,024.
    vllm_restarted = _since(_vllm("after-cold"), _vllm("before"))
    vllm_restarted = re.sub(
        r"^(vllm:\S+_total\{[^}]*\}) (\S+)$",
        lambda m: f"{m.group(1)} {float(m.group(2)) / 2!r}",
        vllm_restarted,
        flags=re.M,
    )
    d = _last_interval(
        _snap(_vllm("after-cold"), _server("after-cold")),
        _snap(vllm_restarted, _server("after-store-without-load")),
    )
    assert d.deltas[Signal.PROMPT_TOKENS] == 65536.0  # vLLM's own reset: the increase since its restart
    assert _ev(d, Evidence.STORED) == 512.0  # the server's series kept counting: 1,024 - 512


def test_an_extra_endpoint_that_failed_makes_the_state_unknown_never_not_storing() -> None:
    # The server's fetch failed on the last poll: its series are missing, vLLM's computed 131,072 tokens.
    first, second = _snap(_vllm("after-cold"), _server("after-cold")), _snap(_vllm("after-store-without-load"), None)
    d = _last_interval(first, second)
    assert not d.state_known
    assert explain(d, second.engine(KEY) or _fail(), second.families) is None
    # Back on the next poll: the increase across the gap is counted, and the state is known again.
    back = _snap(_vllm("after-store-without-load"), _server("after-store-without-load"))
    d2 = compare(_chain(first), _chain(first, second, back), KEY)
    assert d2.state_known
    assert _ev(d2, Evidence.STORED) == 512.0


def test_a_restarted_source_without_its_old_series_is_known_again() -> None:
    # The server restarted and has not yet created its read/hit series: they are excused by the restart.
    restarted = "\n".join(
        ln for ln in _since(_server("after-hit"), _server("after-cold")).splitlines() if "read" not in ln
    )
    d = _last_interval(_snap(_vllm("after-cold"), _server("after-cold")), _snap(_vllm("after-hit"), restarted))
    assert d.state_known


def test_one_data_parallel_rank_restarting_resets_only_that_rank() -> None:
    before, after = (DP2 / "after-cold.prom").read_text(), (DP2 / "after-mixed.prom").read_text()
    rank1_restarted = _since(after, before, match='engine="1"')
    snaps = (normalise(before), normalise(rank1_restarted))
    p0 = advance(None, snaps[0], 0.0)
    p1 = advance(p0, snaps[1], 1.0)
    keys = sorted(p1.totals)
    rank0 = next(k for k in keys if k[1] == "0")
    rank1 = next(k for k in keys if k[1] == "1")
    plain = compare(
        advance(None, normalise(before), 0.0),
        advance(advance(None, normalise(before), 0.0), normalise(after), 1.0),
        rank0,
    )
    assert compare(p0, p1, rank0).deltas[Signal.PROMPT_TOKENS] == plain.deltas[Signal.PROMPT_TOKENS]
    # rank 1's counters since its restart are its increase: the same delta as without a restart
    plain1 = compare(
        advance(None, normalise(before), 0.0),
        advance(advance(None, normalise(before), 0.0), normalise(after), 1.0),
        rank1,
    )
    assert compare(p0, p1, rank1).deltas[Signal.PROMPT_TOKENS] == plain1.deltas[Signal.PROMPT_TOKENS]


def test_a_family_both_bodies_declare_stays_vllms() -> None:
    _, origins = join_sources(_vllm("after-cold"), [_server("after-cold")])
    assert "vllm:external_prefix_cache_hits" in body_families(_vllm("after-cold"))
    assert "vllm:external_prefix_cache_hits" not in origins
    assert body_families("invented_family_1 1\ninvented_family_2 2\n") == frozenset()  # only what is read
    assert origins.get("lmcache_mp_l1_write_chunks") == 1
    _, dup = join_sources(_vllm("after-cold"), [_vllm("after-cold")])
    assert dup == {}


def _fail() -> object:
    raise AssertionError("engine missing")
