"""promtool cases of the alerts on the monitoring itself (kvoffload_exporter.bundle.alerting.fleet_rules): Prometheus's
own `up` of an exporter job failing, vanishing, or never there."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from kvoffload_exporter.bundle.alerting import fleet_rules
from kvoffload_exporter.bundle.alerting.ruletypes import AlertName
from kvoffload_exporter.bundle.ruletests import testvalues as tv
from kvoffload_exporter.bundle.ruletests.base import Builder, Case, _Env, _gauge, _quarter
from kvoffload_exporter.bundle.settings import Settings

_JOB = ("job", "instance")


def _picks(e: _Env, job: str) -> bool:
    return all(tv.matches(m, job) for m in fleet_rules.job_matchers(e.s, e.sel))


def _job(e: _Env) -> str:
    """A job name the rules' job matchers (`exporter_jobs`, or the user's `job` selectors) select."""
    candidates = [*tv._examples(e.s.exporter_jobs), "kvoffload", "vllm-kvoffload-0"]
    candidates += [m.value for m in e.sel if m.label == "job" and m.op == "="]
    return next((x for x in candidates if _picks(e, x)), "kvoffload")


def _up_labels(e: _Env, c: Case) -> dict[str, str]:
    lb = e.labels(c, _JOB, job=_job(e), instance="kvoffload-exporter-1:9466")
    c.fits &= _picks(e, lb.get("job", ""))
    return lb


def _exporter_down(e: _Env, fire: bool) -> tuple[Case, int]:
    t = e.at(e.s.exporter_down_for)
    c = Case("the replica's scrapes fail (up 0)" if fire else "the replica is scraped (up 1)")
    lb = _up_labels(e, c)
    c.series = [("up", lb, _gauge(0 if fire else 1, e.n(t)))]
    c.expected = [(lb, 0)] if fire else []
    return c, t


def _job_vanished(e: _Env, fire: bool) -> tuple[Case, int]:
    t = e.at(e.s.exporter_down_for, plus=4)
    c = Case("the job's only target leaves discovery" if fire else "the job keeps its target")
    c.fits &= t < tv.duration_ms(e.s.absent_memory)
    lb = _up_labels(e, c)
    c.series = [("up", lb, "1x2 stale" if fire else _gauge(1, e.n(t)))]
    c.expected = [({"job": lb["job"]} if "job" in lb else {}, 1)] if fire else []
    return c, t


def _absent(e: _Env, fire: bool) -> tuple[Case, int]:
    t = e.at(e.s.exporter_down_for)
    c = Case("only Prometheus scrapes itself" if fire else "an exporter job is scraped")
    lb = _up_labels(e, c)
    other = {**lb, "job": "prometheus-self-x", "instance": "localhost:9090"}
    c.fits &= not _picks(e, other["job"])
    c.series = [("up", other if fire else lb, _gauge(1, e.n(t)))]
    # absent() keeps the labels of equality matchers (the user's `=` selectors), nothing else.
    equal = {m.label: m.value for m in e.sel if m.op == "="}
    c.expected = [(equal, 1)] if fire else []
    return c, t


BUILDERS: Mapping[str, Builder] = {
    AlertName.EXPORTER_DOWN: _exporter_down,
    AlertName.EXPORTER_JOB_VANISHED: _job_vanished,
    AlertName.EXPORTER_ABSENT: _absent,
}
STEPS: Mapping[str, Callable[[Settings], int]] = {name: lambda s: _quarter(s.exporter_down_for) for name in BUILDERS}
