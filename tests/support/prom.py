"""The one Prometheus text reader for tests: prometheus_client's parser, independent of the exporter's own
(`kvoffload_exporter.ingest.exposition`), so a test that reads a body both ways can catch a parsing bug in either."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import NamedTuple

from prometheus_client.openmetrics.parser import text_string_to_metric_families as _openmetrics_families
from prometheus_client.parser import text_string_to_metric_families


class Sample(NamedTuple):
    name: str
    labels: dict[str, str]
    value: float


class Family(NamedTuple):
    name: str
    type: str
    samples: list[Sample]


def families(text: str, openmetrics: bool = False) -> list[Family]:
    """Every family with its type and samples; `openmetrics` reads the OpenMetrics format (and fails on
    what it forbids, such as a body without `# EOF`)."""
    parse = _openmetrics_families if openmetrics else text_string_to_metric_families
    return [Family(f.name, f.type, [Sample(s.name, dict(s.labels), s.value) for s in f.samples]) for f in parse(text)]


def samples(text: str) -> list[Sample]:
    """Every sample line, in order (`_bucket`, `_count`, `_created` … under their own names)."""
    return [
        Sample(s.name, dict(s.labels), s.value) for fam in text_string_to_metric_families(text) for s in fam.samples
    ]


def total(text: str, name: str, **labels: str) -> float:
    """Sum of all samples of `name` whose labels include `labels` (0.0 when there are none)."""
    return sum(s.value for s in samples(text) if s.name == name and _has(s.labels, labels))


def one(text: str, name: str, **labels: str) -> float:
    """The value of the single sample of `name` with `labels`; fails when there are none or several."""
    hits = [s.value for s in samples(text) if s.name == name and _has(s.labels, labels)]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def _has(have: Mapping[str, str], want: Mapping[str, str]) -> bool:
    return all(have.get(k) == v for k, v in want.items())


def offload_bytes_oracle(text: str) -> dict[str, float]:
    """Flat offload bytes per direction, and the legacy transfer_type mirror, so tests can prove the
    exporter uses one generation and never both."""
    out = {"flat_load": 0.0, "flat_store": 0.0, "legacy_load": 0.0, "legacy_store": 0.0}
    for s in samples(text):
        if s.name == "vllm:kv_offload_load_bytes_total":
            out["flat_load"] += s.value
        elif s.name == "vllm:kv_offload_store_bytes_total":
            out["flat_store"] += s.value
        elif s.name == "vllm:kv_offload_total_bytes_total":
            key = "legacy_load" if s.labels["transfer_type"] == "CPU_to_GPU" else "legacy_store"
            out[key] += s.value
    return out


# ---- counter deltas, keyed exactly as the fixtures' expected_deltas.json ------------------------------

_KEEP = (
    "vllm:prefix_cache_",
    "vllm:external_prefix_cache_",
    "vllm:kv_offload_",
    "vllm:prompt_tokens",
    "vllm:request_success_total",
    "vllm:time_to_first_token_seconds_",
    "vllm:request_queue_time_seconds_",
    "vllm:request_prefill_kv_computed_tokens_",
    "vllm:kv_cache_usage_perc",
    "vllm:num_preemptions_total",
)
_DROP_LABELS = ("model_name", "engine")


def series(text: str) -> dict[str, float]:
    """Kept series without buckets/_created, `model_name`/`engine` labels removed from the key."""
    out = {}
    for s in samples(text):
        if s.name.endswith(("_bucket", "_created")) or not s.name.startswith(_KEEP):
            continue
        rest = ",".join(f'{k}="{v}"' for k, v in s.labels.items() if k not in _DROP_LABELS)
        out[s.name + (f"{{{rest}}}" if rest else "")] = s.value
    return out


def deltas(snapshots: Mapping[str, str]) -> dict[str, dict[str, float]]:
    """Non-zero differences between consecutive snapshots, keyed like expected_deltas.json."""
    res = {}
    for a, b in itertools.pairwise(snapshots):
        va, vb = series(snapshots[a]), series(snapshots[b])
        res[f"{a} -> {b}"] = {
            k: round(v - va.get(k, 0.0), 6) for k, v in sorted(vb.items()) if abs(v - va.get(k, 0.0)) > 1e-12
        }
    return res
