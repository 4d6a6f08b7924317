"""A target's line plan changes no reading: a body of the last one's shape read by position gives the same
snapshot or the same error as the long way; a changed shape falls back; a churning target stops building."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_line_cache import _outcome_default as _outcome

from kvoffload_exporter.config.limits import Limits
from kvoffload_exporter.ingest import exposition, lineplan
from kvoffload_exporter.ingest.linecache import LineCache
from kvoffload_exporter.ingest.normalise import normalise

CAPTURE = Path(__file__).parent / "fixtures" / "h200-0.6b" / "A_12_final.prom"
TEXT = CAPTURE.read_text()
LINES = TEXT.split("\n")
_VALUE = re.compile(r"^(vllm:\S+(?:\{[^}]*\})?) (\S+)$")


def _planned() -> LineCache:
    """A cache whose plan is of the capture's shape."""
    cache = LineCache()
    normalise(TEXT, None, cache)
    assert isinstance(cache.plan.plan, lineplan.Plan)
    return cache


def _advanced(k: int) -> str:
    """The capture with every sample value changed (k-th step), its shape kept."""
    return "\n".join(
        f"{m.group(1)} {float(m.group(2)) + k!r}"
        if (m := _VALUE.match(line)) and m.group(2) not in ("NaN", "+Inf", "-Inf")
        else line
        for line in LINES
    )


def test_bodies_of_the_same_shape_are_read_by_the_plan_as_the_long_way_reads_them() -> None:
    cache = _planned()
    replays = 0
    for k in range(1, 12):
        body = _advanced(k)
        before = cache.plan.plan
        assert _outcome(body, cache) == _outcome(body, None)
        replays += cache.plan.plan is before  # a replay keeps the plan; a miss drops or rebuilds it
    assert replays == 11


def _swap(i: int, line: str) -> str:
    return "\n".join([*LINES[:i], line, *LINES[i + 1 :]])


def _index(pred: object) -> int:
    return next(i for i, line in enumerate(LINES) if pred(line))  # type: ignore[operator]


SELECTED = _index(lambda line: line.startswith("vllm:prefix_cache_hits"))
DROPPED = _index(lambda line: line.startswith("python_gc_objects_collected_total"))
TYPE_LINE = _index(lambda line: line.startswith("# TYPE vllm:prefix_cache_hits"))
CREATED = _index(lambda line: line.startswith("vllm:prefix_cache_hits_created{"))  # kept by its key, not selected
PAST_CAP = 40 * Limits().label_value_length_limit + 2048  # longer than any line the reader accepts
CAP = 32 * Limits().label_value_length_limit + 1024  # normalise's line cap (_LINE_FACTOR)
_CREATED_TEXT = LINES[CREATED].rpartition(" ")[0]

SAME_SHAPE = {
    "a dropped line repeats a selected series": lambda: _swap(DROPPED, LINES[SELECTED]),
    "a dropped line becomes a new selected series": lambda: _swap(
        DROPPED, LINES[SELECTED].replace('engine="0"', 'engine="7"')
    ),
    "a selected series gets other labels": lambda: _swap(SELECTED, LINES[SELECTED].replace('engine="0"', 'engine="3"')),
    "a TYPE line declares another family": lambda: _swap(TYPE_LINE, "# TYPE vllm:kv_offload_total_bytes counter"),
    "a TYPE line becomes a HELP line": lambda: _swap(TYPE_LINE, LINES[TYPE_LINE].replace("# TYPE", "# HELP")),
    "a timestamp after a value": lambda: _swap(SELECTED, LINES[SELECTED] + " 1700000000000"),
    "an exemplar after a value": lambda: _swap(SELECTED, LINES[SELECTED] + ' # {trace_id="x"} 1.0'),
    "a blank line instead of a dropped one": lambda: _swap(DROPPED, ""),
    "an unselected series grows past the line cap": lambda: _swap(
        CREATED, f"{LINES[CREATED].rpartition(' ')[0]} {'9' * PAST_CAP}"
    ),
    "an unselected series one character past the line cap": lambda: _swap(
        CREATED, f"{_CREATED_TEXT} {'9' * (CAP - len(_CREATED_TEXT))}"
    ),
    "an unselected series exactly at the line cap": lambda: _swap(
        CREATED, f"{_CREATED_TEXT} {'9' * (CAP - len(_CREATED_TEXT) - 1)}"
    ),
    "a series replaced by a bare value": lambda: _swap(SELECTED, " 5"),
    "a value glued to its label set": lambda: _swap(SELECTED, LINES[SELECTED].replace("} ", "}")),
    "a series without its value": lambda: _swap(SELECTED, LINES[SELECTED].rpartition(" ")[0]),
    "a series with two spaces before its value": lambda: _swap(SELECTED, LINES[SELECTED].replace("} ", "}  ")),
    "a series text followed by more than its value": lambda: _swap(SELECTED, LINES[SELECTED].replace("} ", "}_x ")),
}
VALUES = (
    *("NaN", "+Inf", "-Inf", "1e999", "1_000", "0x10", "1.2.3", "-1", ".", "", "\t5", "5\r", "9" * 400, "١"),
    *("\x0b5", "5\x0c", "\x1c5", "5\x1f", "infinity", "nan", "1E+3", "+.5", "5\xa0", "\u20075"),
)


@pytest.mark.parametrize("case", sorted(SAME_SHAPE))
def test_a_changed_line_in_a_body_of_the_same_length_reads_as_the_long_way(case: str) -> None:
    body = SAME_SHAPE[case]()
    assert body.count("\n") == TEXT.count("\n")
    assert _outcome(body, _planned()) == _outcome(body, None)


@pytest.mark.parametrize("value", VALUES)
def test_a_value_that_is_not_a_plain_finite_decimal_reads_as_the_long_way(value: str) -> None:
    name = LINES[SELECTED].rpartition(" ")[0]
    body = _swap(SELECTED, f"{name} {value}")
    assert _outcome(body, _planned()) == _outcome(body, None)


POOL = st.sampled_from(
    [
        *LINES[::7],
        LINES[SELECTED],
        LINES[SELECTED].replace("} ", "}"),
        f"{LINES[CREATED].rpartition(' ')[0]} {'9' * PAST_CAP}",
        "",
        "# HELP vllm:x y",
        "# TYPE vllm:prefix_cache_hits gauge",
        *(f"{LINES[SELECTED].rpartition(' ')[0]} {v}" for v in VALUES),
    ]
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(LINES) - 1), POOL), min_size=1, max_size=4), st.integers(1, 9))
def test_any_same_length_body_after_a_planned_one_reads_as_the_long_way(changes: list[tuple[int, str]], k: int) -> None:
    lines = _advanced(k).split("\n")
    for i, line in changes:
        lines[i] = line
    body = "\n".join(lines)
    assert _outcome(body, _planned()) == _outcome(body, None)


def test_a_plan_is_not_built_for_lines_near_the_length_cap() -> None:
    cache = _planned()
    plan = cache.plan.plan
    assert plan is not None
    longest = max(map(len, plan.prefixes))  # the longest series text
    got = lineplan.build(
        plan.key, LINES, plan.key[0], 5 + exposition.KEY, cache.known, exposition._COMMENTS, [], set(), longest + 5
    )
    assert got is None


def test_a_churning_target_builds_a_plan_ever_more_rarely(monkeypatch: pytest.MonkeyPatch) -> None:
    builds = []
    real = lineplan.build

    def counting(*args: object) -> lineplan.Plan | None:
        plan = real(*args)  # type: ignore[arg-type]
        builds.append(plan is not None)
        return plan

    monkeypatch.setattr(lineplan, "build", counting)
    cache = LineCache()
    for k in range(64):  # a label value changes every poll: no plan can ever be replayed
        normalise(TEXT.replace("Qwen/Qwen3-0.6B", f"Qwen/Qwen3-0.6B-{k}"), None, cache)
    assert 1 <= len(builds) <= 8, builds
    monkeypatch.setattr(lineplan, "build", real)
    for k in range(3):  # a target that settles is planned again
        normalise(_advanced(k), None, cache)
    assert cache.plan.plan is not None or cache.plan.wait > 0


BYTES_BODIES = {  # the plan reads UTF-8 bytes lines with their newlines; the long way str lines
    "the body's last newline missing": lambda k: _advanced(k).removesuffix("\n"),
    "a last line without a newline after the body's": lambda k: _advanced(k) + LINES[CREATED],
    "a CRLF body": lambda k: _advanced(k).replace("\n", "\r\n"),
    "a non-ASCII model name": lambda k: _advanced(k).replace("Qwen/Qwen3-0.6B", "Qwen/Квен-0.6B"),
    "a lone surrogate in a label value": lambda k: _advanced(k).replace("Qwen/Qwen3-0.6B", "Qwen/\udc80"),
}


@pytest.mark.parametrize("case", sorted(BYTES_BODIES))
def test_bodies_read_as_bytes_by_the_plan_read_as_the_long_way(case: str) -> None:
    make = BYTES_BODIES[case]
    cache = LineCache()
    _outcome(make(1), cache)  # the plan of this body's own shape (or its error)
    for k in (2, 3):
        body = make(k)
        assert _outcome(body, cache) == _outcome(body, None)
    planned = _planned()  # ... and a body of this shape after the capture's plan
    assert _outcome(make(4), planned) == _outcome(make(4), None)


def test_a_non_ascii_body_is_replayed_by_its_plan() -> None:
    make = BYTES_BODIES["a non-ASCII model name"]
    cache = LineCache()
    normalise(make(1), None, cache)
    plan = cache.plan.plan
    assert plan is not None
    normalise(make(2), None, cache)
    assert cache.plan.hit and cache.plan.plan is plan


def test_a_planned_value_never_takes_its_line_past_the_cap() -> None:
    """A plan accepts a value only where its line stays within the cap: all the rests in the least room
    the series leave, or each no longer than a plain decimal, which the plan left room for."""
    text = "vllm:num_requests_running{" + "a" * 200 + "}"
    head = ("vllm:num_requests_running", "", ((("", ""), (), False, None)))
    cap = len(text) + 50
    known = {text.encode(): head}
    plan = lineplan.build(("k",), [f"{text} 1", ""], frozenset({text[5:17]}), 17, known, {}, [(*head, 1.0)], set(), cap)
    assert plan is not None
    assert lineplan.replay(plan, lineplan.lines_of(f"{text} {'1' * 40}\n")) is not None
    assert len(f"{text} {'1' * 50}") > cap
    assert lineplan.replay(plan, lineplan.lines_of(f"{text} {'1' * 50}\n")) is None


def test_a_planned_read_gives_the_long_ways_samples_and_picks_them_by_position() -> None:
    from kvoffload_exporter.ingest.normalise import _SELECTORS
    from kvoffload_exporter.ingest.samples import labels_reader

    n = Limits().label_value_length_limit
    args = (_SELECTORS["vllm:"], labels_reader(n), Limits().sample_limit, CAP, None, n)
    cache = LineCache()
    exposition.read(_advanced(1), *args[:4], cache, n)
    samples, typed = exposition.read(_advanced(2), *args[:4], cache, n)
    assert cache.plan.hit and isinstance(samples, lineplan.Planned)
    long_samples, long_typed = exposition.read(_advanced(2), *args)
    assert (list(samples), typed) == (long_samples, long_typed)
    at = lineplan.pick([3, 0, len(long_samples) - 1])
    assert (
        samples.pick(at) == list(at(long_samples))
        and samples[5] == long_samples[5]
        and len(samples) == len(long_samples)
    )


def test_a_planned_cache_keeps_no_dict_and_a_miss_rebuilds_the_same_entries() -> None:
    """The memory a planned target saves changes no reading: the dict the long way filled is dropped once
    the plan holds its keys and heads, and rebuilt with the same entries (the same objects) when a body
    is read the long way again; the budget counts what is held."""
    cache = LineCache()
    normalise(TEXT, None, cache)
    assert cache._known is None and cache.plan.plan is not None  # planned: no dict
    before = lineplan.entries(cache.plan.plan)
    assert 100 < len(before) < 400
    normalise(_advanced(1), None, cache)
    assert cache._known is None and cache.plan.hit
    assert cache.size == sum(map(len, before)) + LineCache.ENTRY * len(before)
    moved = TEXT.replace('transfer_type="CPU_to_GPU"} ', 'transfer_type="CPU_to_GPU" } ', 1)  # the long way
    assert _outcome(moved, cache) == _outcome(moved, None)
    assert not cache.plan.hit
    rebuilt = cache.known
    assert rebuilt.keys() >= before.keys()
    assert all(rebuilt[k] is before[k] or rebuilt[k] == before[k] for k in before)
    assert _outcome(_advanced(2), cache) == _outcome(_advanced(2), None)


def test_targets_of_one_version_share_every_part_of_their_plans_but_their_series() -> None:
    a, b = _planned(), LineCache()
    normalise(TEXT.replace("Qwen/Qwen3-0.6B", "other/model"), None, b)
    pa, pb = a.plan.plan, b.plan.plan
    assert pa is not None and pb is not None
    for part in ("starts", "texts", "fronts", "families", "suffixes", "shared", "typed"):
        assert getattr(pa, part) is getattr(pb, part), part
    assert pa.labels != pb.labels
    # its own part of the labels: the engine of each series, one object (no tuple a series, ~5.6 KiB)
    assert len(pb.own) == len(pb.families) > 100 and len({id(k) for k in pb.own}) == len(set(pb.own)) <= 2
    assert ("other/model", "0") in pb.own
    # a target's own part of its ~220 series texts: the model name and the labels after it, a few objects
    assert len(pb.backs) == len(pb.prefixes) > 200 and len({id(b) for b in pb.backs}) < 20
    assert all(b.startswith(b"other/model") for b in pb.backs if b.endswith(b"}"))
    assert pb.prefixes == tuple(p.replace(b"Qwen/Qwen3-0.6B", b"other/model") for p in pa.prefixes)


@pytest.mark.parametrize(
    "old,new",
    [
        ('model_name="Qwen/Qwen3-0.6B"', 'model_name="Qwen/Qwen3-0.6C"'),  # the target's own part changed
        ('model_name="Qwen/Qwen3-0.6B"', 'model_name="Qwen/Qwen3-0.6B",x="1"'),  # ... grew
        ('{engine="0",model_name=', '{engine="1",model_name='),  # the shared part changed
        ('transfer_type="CPU_to_GPU"}', 'transfer_type="CPU_to_GPX"}'),  # the labels after the model name
    ],
)
def test_a_series_text_changed_on_either_side_of_the_cut_is_read_the_long_way(old: str, new: str) -> None:
    i = _index(lambda line: old in line and not line.startswith("#") and "_created" not in line)
    body = _swap(i, LINES[i].replace(old, new, 1))
    cache = _planned()
    assert _outcome(body, cache) == _outcome(body, None)
    assert not cache.plan.hit


def test_an_idle_target_is_told_by_the_text_of_its_values_and_a_respelled_value_reads_the_same() -> None:
    """A planned target keeps the text of its last values, not the floats: the same text again gives the
    last snapshot itself; the same numbers written otherwise (`5` for `5.0`, `5e0`) are read again, to an
    equal snapshot; a changed value to the long way's snapshot."""
    cache = LineCache()
    body = _advanced(1)
    normalise(body, None, cache)
    first = normalise(body, None, cache)  # planned from here on
    assert cache.plan.hit and isinstance(cache.last.text, bytes) and len(cache.last.text) < 4096  # type: ignore[union-attr]
    assert normalise(body, None, cache) is first
    respelled = re.sub(r" (\d+)\.0$", r" \1", body, flags=re.M)
    assert respelled != body
    again = normalise(respelled, None, cache)
    assert cache.plan.hit and again is not first and again == first == normalise(respelled, None)
    changed = _advanced(2)
    assert normalise(changed, None, cache) == normalise(changed, None) != first
