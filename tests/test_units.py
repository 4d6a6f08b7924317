"""Pure unit tests: parser edge cases, reset-aware derivation, quantiles, states, rendering, config."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvoffload_exporter.catalogue import CATALOGUE
from kvoffload_exporter.config.settings import ConfigError, from_mapping, load_file, parse_duration
from kvoffload_exporter.derive import window as derive
from kvoffload_exporter.expose.render import Exposition
from kvoffload_exporter.ingest.exposition import ParseError
from kvoffload_exporter.ingest.normalise import normalise


def expo(
    load: float | None = None,
    store: float = 0.0,
    hits: float = 0.0,
    queries: float = 0.0,
    flat: bool = True,
    ttft: tuple[float, ...] | None = None,
    extra: str = "",
) -> str:
    lb = 'engine="0",model_name="m"'
    lines = [f"vllm:prefix_cache_queries_total{{{lb}}} {queries}", f"vllm:prefix_cache_hits_total{{{lb}}} {hits}"]
    if flat:
        lines += [
            "# TYPE vllm:kv_offload_load_bytes_total counter",
            "# TYPE vllm:kv_offload_store_bytes_total counter",
            f"vllm:kv_offload_store_bytes_total{{{lb}}} {store}",
        ]
        if load is not None:
            lines.append(f"vllm:kv_offload_load_bytes_total{{{lb}}} {load}")
    if ttft:
        bounds = (0.01, 0.1, 1.0)
        for b, c in zip(bounds, ttft):
            lines.append(f'vllm:time_to_first_token_seconds_bucket{{{lb},le="{b}"}} {c}')
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{{lb},le="+Inf"}} {ttft[-1]}')
        lines.append(f"vllm:time_to_first_token_seconds_count{{{lb}}} {ttft[-1]}")
        lines.append(f"vllm:time_to_first_token_seconds_sum{{{lb}}} 1.0")
    return "\n".join(lines) + "\n" + extra


# --- parser / normaliser ---------------------------------------------------------------------------


def test_names_without_total_and_escaped_prefix_are_accepted() -> None:
    text = (
        'vllm_prefix_cache_hits{engine="0",model_name="m"} 7\n'
        'vllm:prefix_cache_queries{engine="0",model_name="m"} 9\n'
        'vllm:prefix_cache_queries_created{engine="0",model_name="m"} 1.7e9\n'
    )
    (e,) = normalise(text).engines
    assert e.counters["gpu_prefix_hits"] == 7 and e.counters["gpu_prefix_queries"] == 9


def test_legacy_transfer_type_is_case_insensitive_and_unknown_types_ignored() -> None:
    lb = 'engine="0",model_name="m"'
    text = (
        f'vllm:kv_offload_total_bytes_total{{{lb},transfer_type="cpu_to_gpu"}} 5\n'
        f'vllm:kv_offload_total_bytes_total{{{lb},transfer_type="GPU_to_CPU"}} 11\n'
        f'vllm:kv_offload_total_bytes_total{{{lb},transfer_type="NPU_to_DISK"}} 99\n'
    )
    snap = normalise(text)
    assert snap.generation == "transfer_type"
    (e,) = snap.engines
    assert (e.counters["offload_load_bytes"], e.counters["offload_store_bytes"]) == (5, 11)


def test_flat_preferred_over_legacy_never_summed() -> None:
    lb = 'engine="0",model_name="m"'
    text = (
        f"vllm:kv_offload_store_bytes_total{{{lb}}} 10\n"
        f'vllm:kv_offload_total_bytes_total{{{lb},transfer_type="GPU_to_CPU"}} 10\n'
    )
    (e,) = normalise(text).engines
    assert e.counters["offload_store_bytes"] == 10


def test_pid_split_counters_summed_gauges_maxed() -> None:
    lb = 'engine="0",model_name="m"'
    text = (
        f'vllm:prefix_cache_hits_total{{{lb},pid="1"}} 3\nvllm:prefix_cache_hits_total{{{lb},pid="2"}} 4\n'
        f'vllm:kv_offload_cpu_cache_usage_perc{{{lb},pid="1"}} 0.0\n'
        f'vllm:kv_offload_cpu_cache_usage_perc{{{lb},pid="2"}} 0.08\n'
    )
    snap = normalise(text)
    (e,) = snap.engines
    assert e.counters["gpu_prefix_hits"] == 7 and e.offload_inflight == 0.08 and snap.multiprocess


def test_engines_are_kept_apart() -> None:
    text = (
        'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 1\n'
        'vllm:prefix_cache_hits_total{engine="1",model_name="m"} 2\n'
    )
    assert [e.counters["gpu_prefix_hits"] for e in normalise(text).engines] == [1, 2]


def test_missing_family_is_absent_not_zero() -> None:
    (e,) = normalise('vllm:prefix_cache_hits_total{engine="0",model_name="m"} 1\n').engines
    assert "external_prefix_hits" not in e.counters and e.ttft is None


def test_lookalike_families_ignored() -> None:
    text = (
        'vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 5\n'
        'vllm:num_requests_waiting{engine="0",model_name="m"} 2\n'
    )
    (e,) = normalise(text).engines
    assert e.requests_waiting == 2


@pytest.mark.parametrize(
    "bad",
    [
        'vllm:prefix_cache_hits_total{engine="0" 1\n',
        'vllm:prefix_cache_hits_total{engine="0",model_name="m"} abc\n',
        'vllm:prefix_cache_hits_total{engine="0",model_name="m"}\n',
        # a bound that is not a number must not escape as a bare ValueError
        'vllm:time_to_first_token_seconds_bucket{engine="0",model_name="m",le="x"} 1\n',
    ],
)
def test_malformed_wanted_lines_raise(bad: str) -> None:
    with pytest.raises(ParseError):
        normalise(bad)


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf"])
def test_non_finite_cumulative_values_raise(value: str) -> None:
    # NaN/Inf in a counter would make every later delta NaN (clamped to 0): state stuck at idle.
    lb = 'engine="0",model_name="m"'
    for line in (
        f"vllm:kv_offload_load_bytes_total{{{lb}}} {value}\n",
        f"vllm:prefix_cache_hits_total{{{lb}}} {value}\n",
        f'vllm:prompt_tokens_by_source_total{{{lb},source="local_compute"}} {value}\n',
        f'vllm:time_to_first_token_seconds_bucket{{{lb},le="+Inf"}} {value}\n',
    ):
        with pytest.raises(ParseError, match="non-finite"):
            normalise(line)
    # A non-finite gauge is dropped (absent), never exported as NaN/Inf.
    (e,) = normalise(f"vllm:num_requests_waiting{{{lb}}} {value}\n").engines
    assert e.requests_waiting is None


def test_unknown_garbage_lines_are_ignored() -> None:
    snap = normalise("garbage here\nfoo{ 1\n" + expo(store=3))
    assert snap.engines[0].counters["offload_store_bytes"] == 3


def test_label_escapes() -> None:
    (e,) = normalise('vllm:prefix_cache_hits_total{engine="0",model_name="a\\"b\\\\c"} 1\n').engines
    assert e.model_name == 'a"b\\c'


# --- derivation --------------------------------------------------------------------------------------


def _points(texts: list[str], dt: float = 10.0) -> list[derive.Point]:
    pts: list[derive.Point] = []
    for i, t in enumerate(texts):
        pts.append(derive.advance(pts[-1] if pts else None, normalise(t), i * dt))
    return pts


def test_counter_reset_never_negative_nor_spike() -> None:
    pts = _points([expo(load=100, store=1000), expo(load=150, store=1500), expo(load=10, store=20)])
    d = derive.derive(pts, now=20.0, window=60.0)[("m", "0")]
    assert d.deltas["offload_load_bytes"] == 50 + 10
    assert d.deltas["offload_store_bytes"] == 500 + 20
    assert all(v >= 0 for v in d.deltas.values())


def test_window_excludes_old_points() -> None:
    pts = _points([expo(store=0), expo(store=1000), expo(store=1000), expo(store=1000)], dt=100.0)
    d = derive.derive(pts, now=300.0, window=150.0)[("m", "0")]
    assert d.deltas["offload_store_bytes"] == 0 and d.state == "idle" and d.window_seconds == 100.0
    d = derive.derive(pts, now=300.0, window=400.0)[("m", "0")]
    assert d.deltas["offload_store_bytes"] == 1000 and d.state == "storing"


@pytest.mark.parametrize(
    "load,store,hits,state",
    [
        (None, 0, 0, "idle"),
        (0, 500, 0, "storing"),
        (0, 500, 64, "store_without_load"),
        (64, 500, 64, "hit"),
    ],
)
def test_states(load: float | None, store: float, hits: float, state: str) -> None:
    # The tier already held stores at the interval's start (else it is warming up: storing).
    before = normalise(expo(load=0, store=100, hits=0, queries=0))
    after = normalise(expo(load=load, store=store + 100, hits=hits, queries=hits + 10))
    (d,) = derive.interval(before, after).values()
    assert d.state == state


def test_not_configured_without_offload_families() -> None:
    (d,) = derive.interval(None, normalise(expo(flat=False, hits=5, queries=9))).values()
    assert d.state == "not_configured" and d.load_store_ratio is None


def test_ratios_undefined_are_none_never_nan() -> None:
    (d,) = derive.interval(normalise(expo(load=0, store=0)), normalise(expo(load=0, store=0))).values()
    assert d.load_store_ratio is None and d.gpu_hit_ratio is None and d.load_bandwidth is None
    (d,) = derive.interval(normalise(expo(load=0, store=0)), normalise(expo(load=50, store=200))).values()
    assert d.load_store_ratio == 0.25


def test_ttft_quantiles_from_deltas() -> None:
    before = normalise(expo(store=0, ttft=(0, 0, 0)))
    after = normalise(expo(store=0, ttft=(0, 10, 10)))  # 10 observations in (0.01, 0.1]
    (d,) = derive.interval(before, after).values()
    assert d.ttft_quantiles[0.5] == pytest.approx(0.055)
    assert d.ttft_quantiles[0.99] == pytest.approx(0.0991)


def test_histogram_quantile_matches_prometheus_rules() -> None:
    q = derive.histogram_quantile
    assert q(0.5, (1.0, 2.0), (0, 0, 0)) is None
    assert q(0.5, (1.0, 2.0), (2, 4, 4)) == pytest.approx(1.0)
    assert q(0.99, (1.0, 2.0), (0, 0, 5)) == 2.0  # +Inf bucket → highest finite bound


# --- rendering and catalogue -----------------------------------------------------------------------


def test_catalogue_conventions() -> None:
    for name, m in CATALOGUE.items():
        assert name.startswith("kvoffload_") and ":" not in name
        assert name.endswith("_total") == (m.type == "counter"), name
        assert (m.help and m.help[-1] == ".") or m.help.endswith(")"), name
        if m.type == "stateset":
            assert m.labels[-1] in (
                "state",
                "verdict",
                "recommendation",
                "reason",
                "load_band",
            )  # the one-hot label, last


def test_render_rejects_wrong_labels_and_skips_none() -> None:
    x = Exposition()
    with pytest.raises(ValueError):
        x.add("kvoffload_up", 1.0, {"instance": "x"})
    x.add("kvoffload_up", None, {"target": "a"})
    x.add("kvoffload_up", 1.0, {"target": 'a"b'})
    assert x.text() == (
        "# HELP kvoffload_up 1 if the last poll of the vLLM target succeeded, else 0.\n"
        '# TYPE kvoffload_up gauge\nkvoffload_up{target="a\\"b"} 1.0\n'
    )


# --- config ------------------------------------------------------------------------------------------


def test_config_lists_every_error() -> None:
    with pytest.raises(ConfigError) as e:
        from_mapping(
            {
                "targets": [{"url": "ftp://x"}, {"urll": "http://a:1"}],
                "window": "5 parsecs",
                "bogus": 1,
                "host": {"enabled": "yes"},
            }
        )
    msgs = "\n".join(e.value.errors)
    for needle in (
        "targets[0]: url must be http(s)",
        "targets[1]: unknown key 'urll'",
        "window: not a duration",
        "unknown key 'bogus'",
        "host.enabled",
    ):
        assert needle in msgs
    assert len(e.value.errors) >= 6


def test_config_wrong_types_and_unreadable_file_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        from_mapping({"targets": [{"url": "http://a:1", "pidfile": 5, "name": [1]}], "host": {"proc_root": 5}})
    msgs = "\n".join(e.value.errors)
    for needle in ("targets[0]: pidfile must be", "targets[0]: name must be", "host.proc_root: must be a path"):
        assert needle in msgs
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"targets: [\xff\xfe]\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_file(str(bad))
    bad.write_text("- http://a:1\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_file(str(bad))


def test_config_good() -> None:
    cfg = from_mapping(
        {
            "targets": ["http://127.0.0.1:8000", {"url": "http://b:8000", "name": "b", "tier_bytes": 8e9}],
            "window": "10m",
            "poll_interval": "2s",
        }
    )
    assert [t.label for t in cfg.targets] == ["127.0.0.1:8000", "b"]
    assert cfg.window == 600 and cfg.window_label == "10m" and cfg.poll_interval == 2


def test_duplicate_targets_rejected() -> None:
    with pytest.raises(ConfigError, match="duplicate"):
        from_mapping({"targets": ["http://a:1", "http://a:1"]})


@pytest.mark.parametrize("raw,sec", [(5, 5.0), ("500ms", 0.5), ("2m", 120.0), ("1h", 3600.0), ("1.5s", 1.5)])
def test_durations(raw: object, sec: float) -> None:
    assert parse_duration(raw) == sec


def test_tier_bytes_precedence() -> None:
    from kvoffload_exporter.derive.capacity import tier_bytes
    from kvoffload_exporter.ingest.snapshot import EngineSignals

    def e(offload: str | None = None, size: str | None = None) -> EngineSignals:
        return EngineSignals(
            "m",
            "0",
            {},
            offload_config={"cpu_kv_cache_size_bytes": offload} if offload else {},
            cache_config={"kv_offloading_size": size} if size else {},
        )

    assert tier_bytes(e("8000", "2"), 5.0) == 8000.0
    assert tier_bytes(e("junk", "2"), 5.0) == 2 * 2**30
    assert tier_bytes(e(None, "None"), 5.0) == 5.0
    assert tier_bytes(e(), None) is None
