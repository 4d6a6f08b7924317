"""One decision, one advice: the rules that keep `check` from acting on evidence that did not decide."""

from __future__ import annotations

from kvoffload_exporter.canary.check.advice import Action, Evidence, LevelFact, advise

SLOW, FAST, OPEN = "offload_slower", "offload_faster", "inconclusive"


def _levels(*rows: tuple[int, str]) -> tuple[LevelFact, ...]:
    return tuple(LevelFact(c, v, None) for c, v in rows)


def test_an_inconclusive_headline_only_ever_says_measure_longer_whatever_the_payback_model_says() -> None:
    for payback in ("keep", "disable", "shrink", None):
        a = advise(Evidence(OPEN, "interval includes zero", payback_action=payback, payback_why="x"))
        assert a.action == Action.MEASURE_LONGER and a.concurrency is None


def test_undecided_levels_never_make_a_crossover_or_an_action() -> None:
    """The null simulator's typical sweep: point estimates of both signs, every interval includes 0."""
    a = advise(Evidence(OPEN, "x", levels=_levels((1, OPEN), (4, OPEN), (16, OPEN))))
    assert a.action == Action.MEASURE_LONGER
    assert "pays off at no measured level" in a.why and "every measured level" not in a.why


def test_skip_loads_below_needs_a_decided_slower_level_below_a_decided_faster_one() -> None:
    a = advise(Evidence(SLOW, "x", levels=_levels((1, SLOW), (4, OPEN), (16, FAST))))
    assert (a.action, a.concurrency) == (Action.SKIP_LOADS_BELOW, 16)
    assert "undecided at c = 4" in a.why
    assert advise(Evidence(SLOW, "x", levels=_levels((1, SLOW), (16, OPEN)))).action == Action.MEASURE_LONGER


def test_disable_loads_only_when_every_measured_level_is_decidedly_slower() -> None:
    a = advise(Evidence(SLOW, "x", levels=_levels((1, SLOW), (4, SLOW), (16, SLOW))))
    assert a.action == Action.DISABLE_LOADS and "every measured level" in a.why


def test_payback_and_verdict_never_point_opposite_ways_without_saying_which_wins() -> None:
    """The simulator run that said `keep`, `offload_slower` and `disable loading` in one report."""
    a = advise(
        Evidence(SLOW, "offload hit slower than recompute", payback_action="keep", payback_why="saved 4 us/token")
    )
    assert a.action == Action.DISABLE_LOADS
    assert "the payback model says keep" in a.why and "the measured dTTFT wins" in a.why


def test_keep_when_it_pays_off_and_no_level_is_slower() -> None:
    a = advise(Evidence(FAST, "x", levels=_levels((1, FAST), (8, OPEN), (32, FAST))))
    assert a.action == Action.KEEP and "slower at no level" in a.why


def test_a_tier_smaller_than_one_prefix_is_grown() -> None:
    a = advise(
        Evidence(
            "no_offload_hit", "0 offload hits in 10 displaced revisits", state_reasons=("tier_smaller_than_prefix",)
        )
    )
    assert a.action == Action.GROW_TIER


def test_a_run_that_could_not_measure_names_the_fix_never_measure_longer() -> None:
    from kvoffload_exporter.canary.check.advice import CANNOT_MEASURE, EXIT_CODES, FIXES, exit_code

    assert advise(Evidence("error", "x", error="preflight failed")).action == Action.FIX_TARGET
    for action in CANNOT_MEASURE:
        a = advise(Evidence("error", "x", error="HTTP 400", error_action=action))
        assert a.action == action and a.why.endswith(FIXES[action]) and "HTTP 400" in a.why
        assert exit_code(a) == EXIT_CODES[action] == 3
    assert Action.MEASURE_LONGER not in CANNOT_MEASURE and set(FIXES) == set(CANNOT_MEASURE)


def test_the_dict_has_exactly_the_documented_keys() -> None:
    d = advise(Evidence(FAST, "x")).as_dict()
    assert set(d) == {"action", "concurrency", "why"} and d["action"] in {a.value for a in Action}


def test_every_check_document_has_one_advice_even_when_nothing_could_start() -> None:
    from kvoffload_exporter.canary.check.checkreport import error_document

    doc = error_document("--target: not a URL")
    assert doc["advice"]["action"] == "fix_target" and "--target" in doc["advice"]["why"]
    bug = error_document("internal error (KeyError)", Action.REPORT_BUG)
    assert (bug["advice"]["action"], bug["exit_code"]) == ("report_bug", 3)


def test_every_action_has_an_exit_code_and_the_exit_code_follows_the_advice() -> None:
    from kvoffload_exporter.canary.check.advice import EXIT_CODES, exit_code

    assert set(EXIT_CODES) == set(Action)
    # Slower at c = 1, undecided above: the advice is to measure longer, and so is the exit code (not 1).
    a = advise(Evidence(SLOW, "x", levels=_levels((1, SLOW), (4, OPEN))))
    assert (a.action, exit_code(a)) == (Action.MEASURE_LONGER, 4)
    assert exit_code(advise(Evidence(FAST, "x"))) == 0
    assert exit_code(advise(Evidence(SLOW, "x"))) == 1
    assert exit_code(advise(Evidence("error", "x", error="unreachable"))) == 3


def test_a_sweep_splits_the_confidence_over_its_levels() -> None:
    from kvoffload_exporter.canary.check.sweep import SweepRequest

    assert SweepRequest((1, 4), ()).family == 2 and SweepRequest((4, 16), ()).family == 3  # the rounds are c = 1
    assert SweepRequest((1, 4, 16), (1024, 4096)).family == 6
    assert abs(SweepRequest((1, 4, 16, 32), ()).per_level_confidence - 0.9875) < 1e-12


def test_the_readme_and_docs_name_every_action_and_its_exit_code() -> None:
    """A new action is documented where operators look: the README's `check` section and docs/canary.md's exit
    code table, each action in the row of its own exit code."""
    import re
    from pathlib import Path

    from kvoffload_exporter.canary.check.advice import EXIT_CODES

    root = Path(__file__).resolve().parents[1]
    readme, canary = (root / "README.md").read_text(), (root / "docs/canary.md").read_text()
    rows = {int(m[1]): m[2] for m in re.finditer(r"^\| (\d+) \| (.*)$", canary, re.M)}
    for action, code in EXIT_CODES.items():
        assert f"`{action}`" in readme, action
        assert f"`{action}`" in rows.get(code, ""), (action, code)
