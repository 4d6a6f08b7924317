"""The Prometheus side of a sharded `/probe` fleet, generated for N exporter replicas instead of copied by hand.

One scrape job per replica (`vllm-kvoffload-<i>`): discover the vLLM servers, keep those of shard `i` with
`hashmod` over `__address__` (each server goes to exactly one replica), and rewrite the scrape onto that
replica's `/probe?target=…&name=…`. A last job (`vllm-kvoffload-exporters`) scrapes the replicas' own
`/metrics` (health, process, poll histograms). Every job name matches the rules' `exporter_jobs`, so a dead
replica fires KVOffloadExporterDown for each target of its shard and for its own `/metrics`.

Two discoveries: `kubernetes` (pods labelled `app.kubernetes.io/name=vllm` with port 8000, the target named
`namespace/pod`) and `file` (`file_sd_configs`; a target group may set `__kvoffload_name`, else the address
names the target). `render()` writes both for 2 replicas under deploy/prometheus/; `scrape_configs()` builds any N
(tests/test_shard_e2e.py runs the `file` variant on a real Prometheus). Pure: PyYAML only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypedDict

from kvoffload_exporter.bundle.alerting.rulefile import dump_yaml

Discovery = Literal["kubernetes", "file"]


class Relabel(TypedDict, total=False):
    """One `relabel_configs` step, as Prometheus names its fields."""

    source_labels: list[str]
    separator: str
    regex: str
    modulus: int
    target_label: str
    replacement: str
    action: str


class FileSd(TypedDict):
    files: list[str]
    refresh_interval: str


class Static(TypedDict):
    targets: list[str]


class Job(TypedDict, total=False):
    """One `scrape_configs` entry (its discovery keys too: a job and its discovery are one mapping)."""

    job_name: str
    metrics_path: str
    scrape_interval: str
    kubernetes_sd_configs: list[dict[str, str]]
    file_sd_configs: list[FileSd]
    static_configs: list[Static]
    relabel_configs: list[Relabel]


PROBE_JOB = "vllm-kvoffload-{i}"
SELF_JOB = "vllm-kvoffload-exporters"
K8S_REPLICA = "kvoffload-exporter-{i}.kvoffload-exporter.monitoring.svc:9466"
FILE_SD_PATH = "/etc/prometheus/vllm-targets/*.yaml"
DIR = "deploy/prometheus"
EXAMPLE_REPLICAS = 2
NAME_LABEL = "__kvoffload_name"
"""A `file_sd` target group's label naming its servers (dropped after relabeling, like every `__` label)."""


def _discovery(kind: Discovery, files: Sequence[str]) -> tuple[Job, list[Relabel], list[Relabel]]:
    """(sd config, relabel steps that keep the vLLM servers, relabel steps that set `__param_name`)."""
    if kind == "kubernetes":
        keep: list[Relabel] = [
            {
                "source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_name"],
                "regex": "vllm",
                "action": "keep",
            },
            {"source_labels": ["__meta_kubernetes_pod_container_port_number"], "regex": "8000", "action": "keep"},
        ]
        pod = ["__meta_kubernetes_namespace", "__meta_kubernetes_pod_name"]
        return (
            {"kubernetes_sd_configs": [{"role": "pod"}]},
            keep,
            [{"source_labels": pod, "separator": "/", "target_label": "__param_name"}],
        )
    name: list[Relabel] = [
        {"source_labels": ["__address__"], "target_label": "__param_name"},  # the address, unless the group names it
        {"source_labels": [NAME_LABEL], "regex": "(.+)", "target_label": "__param_name"},
    ]
    return {"file_sd_configs": [{"files": list(files), "refresh_interval": "30s"}]}, [], name


def probe_job(
    i: int,
    replicas: int,
    replica_address: str,
    kind: Discovery = "kubernetes",
    files: Sequence[str] = (FILE_SD_PATH,),
    scrape_interval: str = "15s",
) -> Job:
    """The scrape job of replica `i` of `replicas`."""
    if not 0 <= i < replicas:
        raise ValueError(f"replica {i} is not one of 0..{replicas - 1}")
    sd, keep, name = _discovery(kind, files)
    relabel: list[Relabel] = [
        *keep,
        # shard: each server goes to exactly one replica; the modulus is the replica count
        {"source_labels": ["__address__"], "modulus": replicas, "target_label": "__tmp_shard", "action": "hashmod"},
        {"source_labels": ["__tmp_shard"], "regex": str(i), "action": "keep"},
        {
            "source_labels": ["__address__"],
            "regex": "(.+)",
            "replacement": "http://$1",
            "target_label": "__param_target",
        },
        *name,  # `__param_name` becomes the series' `target`
        {"source_labels": ["__param_name"], "target_label": "instance"},
        {"target_label": "__address__", "replacement": replica_address},
    ]
    job: Job = {"job_name": PROBE_JOB.format(i=i), "metrics_path": "/probe", "scrape_interval": scrape_interval}
    job.update(sd)
    job["relabel_configs"] = relabel
    return job


def scrape_configs(
    replica_addresses: Sequence[str],
    kind: Discovery = "kubernetes",
    files: Sequence[str] = (FILE_SD_PATH,),
    scrape_interval: str = "15s",
) -> list[Job]:
    """Every job of a fleet of `len(replica_addresses)` replicas: one `/probe` job each, then their own health."""
    n = len(replica_addresses)
    jobs = [probe_job(i, n, a, kind, files, scrape_interval) for i, a in enumerate(replica_addresses)]
    jobs.append(
        {
            "job_name": SELF_JOB,
            "scrape_interval": scrape_interval,
            "static_configs": [{"targets": list(replica_addresses)}],
        }
    )
    return jobs


_HEADER = """# Generated by `kvoffload-exporter bundle` (bundle/deployment/shards.py): the scrape jobs of {n}
# kvoffload-exporter replicas serving vLLM servers through /probe, sharded with hashmod ({kind} discovery).
# Paste under `scrape_configs:`. For N replicas: one job per replica, `modulus: N` in every job and
# `regex: "<i>"` in job i, each rewritten onto replica i's address (docs/deploy.md, "Growing from 2 to N").
"""


def render() -> dict[str, str]:
    replicas = [K8S_REPLICA.format(i=i) for i in range(EXAMPLE_REPLICAS)]
    out = {}
    for kind in ("kubernetes", "file"):
        k: Discovery = "kubernetes" if kind == "kubernetes" else "file"
        doc = {"scrape_configs": scrape_configs(replicas, k)}
        out[f"{DIR}/sharded-{kind}-sd.yaml"] = _HEADER.format(n=EXAMPLE_REPLICAS, kind=kind) + dump_yaml(doc)
    return out
