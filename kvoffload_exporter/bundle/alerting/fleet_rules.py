"""Alerts on the monitoring itself: a lost exporter, sidecar or `/probe` replica is never silent.

When Prometheus cannot scrape an exporter (a dead sidecar, a dead replica of a sharded `/probe` fleet) the
exporter's `kvoffload_*` series vanish instead of turning 0, so no rule on them can fire. These rules read
what Prometheus itself records about the scrapes of the exporter's jobs (`exporter_jobs`: the sidecars' or
replicas' own `/metrics` and the `/probe` jobs alike): `up` (the target is still discovered and fails),
the job's `up` series vanishing (its targets left discovery) and `absent()` (no job scrapes an exporter at
all). Each builder is one small function; `alerts()` lists them in the order the rule file shows them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kvoffload_exporter.bundle.alerting.promql import Matcher
from kvoffload_exporter.bundle.alerting.ruletypes import AlertName, AlertRule
from kvoffload_exporter.bundle.settings import Settings


def job_matchers(s: Settings, selectors: Sequence[Matcher]) -> list[Matcher]:
    """What picks the exporter's jobs: the `exporter_jobs` regex, and-ed with the user's own `job` selectors
    (a bundle rendered for `--selector job=vllm-sidecar` sets `exporter_jobs` to match it, or `.+`)."""
    return [*(m for m in selectors if m.label == "job"), Matcher("job", "=~", s.exporter_jobs)]


def up(s: Settings, selectors: Sequence[Matcher]) -> str:
    """Prometheus's `up` of the exporter's jobs, with the user's selectors (not a catalogue series)."""
    parts = [*(str(m) for m in selectors), str(Matcher("job", "=~", s.exporter_jobs))]
    return f"up{{{','.join(parts)}}}"


def exporter_down(s: Settings, selectors: Sequence[Matcher]) -> AlertRule:
    return AlertRule(
        AlertName.EXPORTER_DOWN,
        f"{up(s, selectors)} == 0",
        s.exporter_down_for,
        "warning",
        "Prometheus cannot scrape a kvoffload exporter: the offload series it serves are gone.",
        "Prometheus has failed to scrape {{ $labels.instance }} (job {{ $labels.job }}) for "
        f"{s.exporter_down_for}. Its kvoffload series vanish rather than turn 0, so no other offload "
        "alert can fire for what it serves: a dead sidecar blinds its vLLM server, a dead /probe replica "
        "blinds its whole shard (hashmod does not move targets to another replica) until it returns.",
    )


def exporter_job_vanished(s: Settings, selectors: Sequence[Matcher]) -> AlertRule:
    u = up(s, selectors)
    return AlertRule(
        AlertName.EXPORTER_JOB_VANISHED,
        f"group by (job) (max_over_time({u}[{s.absent_memory}]))\nunless on (job)\ngroup by (job) ({u})",
        s.exporter_down_for,
        "warning",
        "A Prometheus job that scraped a kvoffload exporter has no targets left.",
        "Job {{ $labels.job }} scraped a kvoffload exporter within the last "
        f"{s.absent_memory} and has no target now: service discovery lost the sidecars or the replica "
        "of this shard (pods gone, labels or ports changed), so nothing it served is monitored.",
    )


def exporter_absent(s: Settings, selectors: Sequence[Matcher]) -> AlertRule:
    u = up(s, selectors)
    return AlertRule(
        AlertName.EXPORTER_ABSENT,
        f"absent({u})",
        s.exporter_down_for,
        "warning",
        "No Prometheus job scrapes a kvoffload exporter.",
        f"Prometheus has no target of a job matching {s.exporter_jobs!r} (setting exporter_jobs)"
        "{{ if $labels.namespace }} in namespace {{ $labels.namespace }}{{ else }}{{ end }}: no exporter is "
        "discovered or configured, and KV offload is unmonitored there.",
        grafana_presence=f"count({u})",
    )


BUILDERS: tuple[Callable[[Settings, Sequence[Matcher]], AlertRule], ...] = (
    exporter_down,
    exporter_job_vanished,
    exporter_absent,
)


def alerts(s: Settings, selectors: Sequence[Matcher]) -> list[AlertRule]:
    return [b(s, selectors) for b in BUILDERS]


RUNBOOK = """
## KVOffloadExporterDown

**Meaning.** Prometheus has failed to scrape an exporter of a job matching `{exporter_jobs}` for
{exporter_down_for}: a sidecar's or replica's own `/metrics`, or a `/probe` scrape of one target through a
replica. The exporter's `kvoffload_*` series vanish (they do not turn 0), so no other offload alert can
fire for anything it serves. With sharded `/probe` replicas, one alert per target of the dead replica's
shard fires; those targets are unmonitored until the replica returns (static `hashmod` moves nothing).

**Check.** Prometheus → *Status → Targets* for the job: the scrape error (connection refused: the
container is down; context deadline exceeded: the exporter is overloaded, see
`kvoffload_exporter_poll_lag_seconds`). `kubectl get pod` / `describe` for restarts and OOM kills.

**Act.** Restore the container or replica (restarts, memory limit, node). A brief restart (shorter than
{exporter_down_for}) does not fire. If a replica is gone for good, shrink the replica count and its
`hashmod` modulus together (docs/deploy.md, *Growing from 2 to N replicas*).

## KVOffloadExporterJobVanished

**Meaning.** A job that scraped a kvoffload exporter in the last {absent_memory} has no target at all now
(for {exporter_down_for}): service discovery dropped every sidecar or the replica of that shard, so the
job's `up` vanished instead of turning 0.

**Check.** Prometheus → *Status → Service Discovery* for the job: which relabel step drops the targets
(pod labels, port names, namespace). A job renamed on purpose fires until {absent_memory} passed.

**Act.** Fix the discovery (labels, ports, PodMonitor selector) or, if the job was retired on purpose,
silence the alert until it expires.

## KVOffloadExporterAbsent

**Meaning.** No job matching `{exporter_jobs}` has any target in Prometheus for {exporter_down_for}:
nothing scrapes an exporter, so KV offload is unmonitored everywhere (the Grafana-managed copy alerts on
*no data* of `count(up{{...}})`).

**Check.** Is the scrape configuration (ServiceMonitor/PodMonitor, `scrape_configs`) loaded? Do the job
names match the `exporter_jobs` setting of this bundle (`bundle --set exporter_jobs=REGEX`)?

**Act.** Restore the scrape configuration, or re-render the bundle with the job names you use.
"""
"""Runbook sections of these alerts (formatted with the settings, as runbook.py's body is)."""
