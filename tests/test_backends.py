"""Every backend's reconstructed fixture chains, read through `inspect --json`, give the expected state
per engine and carry each upstream store/load/drop series once, with the number expected.json holds.

Why: SimpleCPU (blocks), LMCache (tokens), KVBM (blocks, second endpoint), tiering (per tier) and
MultiConnector (suffixed) say "stored / loaded" in their own families and units; before the resolver
the exporter read them as `not_configured` or `idle`. A row that adds an alternative twice, or reads a
cascade as a second store, changes a number here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvoffload_exporter.cli import main
from kvoffload_exporter.commands.inspect import _load
from kvoffload_exporter.ingest import backends
from kvoffload_exporter.ingest.backends.resolve import _key

ROOT = Path(__file__).resolve().parents[1]
RECON = ROOT / "tests" / "fixtures" / "reconstructed"
DIRS = sorted(p for p in RECON.iterdir() if (p / "expected.json").is_file())
CHAINS = [(d, c) for d in DIRS for c in json.loads((d / "expected.json").read_text())["chains"]]
FITTING = [(d, c) for d, c in CHAINS if json.loads((d / "expected.json").read_text())["fits_schema"]]
"""Chains of backends the evidence schema describes (HiSparse does not: test_hisparse_... below)."""
COUNTED = ("stored", "loaded", "dropped")


def _expected(d: Path) -> dict[str, Any]:
    return json.loads((d / "expected.json").read_text())


def _arg(d: Path, name: str) -> str:
    """All endpoints of the deployment at one state, joined with `+` (inspect reads them as one scrape)."""
    prefixes = [k.removesuffix("<state>.prom") for k in _expected(d)["endpoints"]]
    return "+".join(str(d / (p + name)) for p in prefixes)


def _inspect(capsys: pytest.CaptureFixture[str], *files: str) -> dict[str, Any]:
    assert main(["inspect", *files, "--json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def _delta(engine: dict[str, Any], key: backends.EvidenceKey) -> float | None:
    for e in engine["evidence"]:
        if (e["signal"], e["unit"], e["tier"], e["connector"], e["reason"], e["detail"]) == tuple(key):
            return float(e.get("delta", e.get("value")))
    return None


def _row_for(rows: tuple[backends.Source, ...], entry: dict[str, Any]) -> tuple[backends.Source, dict[str, str]] | None:
    """The resolver row that reads the series expected.json names (same name and selected labels)."""
    want = dict(entry.get("labels", {}))
    for r in rows:
        if r.name != entry["resolved_name"] or r.label_value != entry.get("label_value", ""):
            continue
        labels = dict(r.match)
        if r.tier_label and r.tier_label in want:
            labels[r.tier_label] = want[r.tier_label]
        if labels == want:
            return r, want
    return None


def test_every_backend_has_chains() -> None:
    assert len(DIRS) >= 11 and len(CHAINS) >= 45


@pytest.mark.parametrize(("d", "chain"), CHAINS, ids=lambda x: x.name if isinstance(x, Path) else x["name"])
def test_inspect_gives_the_expected_state_per_engine(
    d: Path, chain: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _inspect(capsys, _arg(d, chain["from"]), _arg(d, chain["to"]))
    got = {e["engine"]: e["state"] for e in doc["engines"]}
    assert got == {k: _state(chain, v["state"]) for k, v in chain["engines"].items()}


def _state(chain: dict[str, Any], want: str) -> str:
    """expected.json predates the warm-up rule (derive.stored_before): stores without loads from an
    empty tier (`before.prom`) are the tier filling up, `storing`; from `after-cold` they stay the failure."""
    return "storing" if want == "store_without_load" and chain["from"] == "before.prom" else want


@pytest.mark.parametrize("d", DIRS, ids=lambda p: p.name)
def test_before_alone_is_idle_when_configured(d: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`before.prom`: the backend is configured (its families or cache_config_info say so), nothing moved.
    One dump alone claims no state (it has no window), so the dump is read against itself."""
    assert {e["state"] for e in _inspect(capsys, _arg(d, "before.prom"))["engines"]} == {None}
    doc = _inspect(capsys, _arg(d, "before.prom"), _arg(d, "before.prom"))
    want = _expected(d)["snapshots"]["before.prom"]["engines"]
    assert {e["engine"]: e["state"] for e in doc["engines"]} == {k: v["state"] for k, v in want.items()}


@pytest.mark.parametrize(("d", "chain"), FITTING, ids=lambda x: x.name if isinstance(x, Path) else x["name"])
def test_each_store_load_drop_series_is_read_once_with_its_value(
    d: Path, chain: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    exp = _expected(d)
    snap = _load(_arg(d, chain["to"]))
    rows = backends.rows_for(snap.backends, snap.families)
    doc = _inspect(capsys, _arg(d, chain["from"]), _arg(d, chain["to"]))
    by_engine = {e["engine"]: e for e in doc["engines"]}
    for engine, want in chain["engines"].items():
        for signal in COUNTED:
            # series that are one evidence key (two failing statuses of one drop reason) add up
            summed: dict[Any, float] = {}
            for entry, value in zip(exp["signals"][signal], want["values"][signal]):
                found = _row_for(rows, entry)
                assert found is not None, f"{signal}: {entry['resolved_name']} {entry.get('labels')} is not read"
                if value is not None:
                    summed[_key(*found)] = summed.get(_key(*found), 0.0) + value
            for key, value in summed.items():
                got = _delta(by_engine[engine], key) or 0.0  # a per-tier series absent = not yet
                assert got == pytest.approx(value), f"{chain['name']} engine {engine} {signal} {key}"


@pytest.mark.parametrize(("d", "chain"), FITTING, ids=lambda x: x.name if isinstance(x, Path) else x["name"])
def test_hits_and_lookups_read_one_alternative_per_group(
    d: Path, chain: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """cached_by_source, the external-prefix counters and a backend's own hit counter say the same thing:
    exactly one of them is read, with its value."""
    exp = _expected(d)
    snap = _load(_arg(d, chain["to"]))
    rows = backends.rows_for(snap.backends, snap.families)
    groups = [r.group for r in rows if r.group]
    assert len(groups) == len(set(groups))
    doc = _inspect(capsys, _arg(d, chain["from"]), _arg(d, chain["to"]))
    by_engine = {e["engine"]: e for e in doc["engines"]}
    for engine, want in chain["engines"].items():
        for signal in ("hits", "lookups"):
            for entry, value in zip(exp["signals"][signal], want["values"][signal]):
                found = _row_for(rows, entry)
                if found is None or value is None:
                    continue
                assert (_delta(by_engine[engine], _key(*found)) or 0.0) == pytest.approx(value), (signal, entry)


def test_hisparse_is_read_as_no_offload_evidence(capsys: pytest.CaptureFixture[str]) -> None:
    """HiSparse's pages and host-to-device bytes are not a prefix-reuse tier (docs/backends.md): none of its
    series becomes stored/loaded/hits/lookups evidence, and the engine stays `not_configured`."""
    d = RECON / "hisparse-0.33"
    assert not _expected(d)["fits_schema"]
    samples = [ln for ln in (d / "after-cold.prom").read_text().splitlines() if ln.startswith("vllm:hisparse_")]
    assert {ln.split("{")[0] for ln in samples} >= {
        "vllm:hisparse_cache_hits_total",
        "vllm:hisparse_host_to_device_bytes_total",
    }
    doc = _inspect(capsys, _arg(d, "before.prom"), _arg(d, "after-cold.prom"))
    assert doc["backends"] == [] and doc["sources"] == []
    assert [(e["state"], e["evidence"]) for e in doc["engines"]] == [("not_configured", [])]
    assert not any("hisparse" in s["resolved_name"] for s in doc["sources"])


def test_cache_config_size_alone_is_configured() -> None:
    """cache_config_info carries --kv-offloading-size even where the backend has no family yet."""
    body = (
        '# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{engine="0",kv_offloading_backend="native",'
        'kv_offloading_size="16.0"} 1.0\n# TYPE vllm:prompt_tokens_total counter\n'
        'vllm:prompt_tokens_total{engine="0",model_name="m"} 0.0\n'
    )
    from kvoffload_exporter.ingest.normalise import normalise

    assert normalise(body).offload_configured
    assert not normalise(body.replace('"16.0"', '"None"')).offload_configured


def test_ratios_never_mix_units(capsys: pytest.CaptureFixture[str]) -> None:
    d = RECON / "simplecpu-0.33"
    doc = _inspect(capsys, _arg(d, "before.prom"), _arg(d, "after-hit.prom"))
    (e,) = doc["engines"]
    assert e["load_store_ratio_unit"] == "blocks"
    assert e["load_store_ratio"] == pytest.approx(8160 / 8192)
    assert e["offload_load_bytes"] is None  # SimpleCPU exposes no bytes: none invented


def test_sources_name_every_family_read(capsys: pytest.CaptureFixture[str]) -> None:
    d = RECON / "kvbm-1.6.1"
    doc = _inspect(capsys, _arg(d, "before.prom"), _arg(d, "after-hit.prom"))
    names = {(s["signal"], s["resolved_name"], s["unit"]) for s in doc["sources"]}
    assert ("loaded", "kvbm_onboard_blocks_h2d", "blocks") in names
    assert ("cascaded", "kvbm_offload_blocks_h2d", "blocks") in names
    assert doc["backends"] == ["kvbm"]


def _exposition(d: Path, before: str, after: str) -> str:
    from kvoffload_exporter.derive.window import interval
    from kvoffload_exporter.expose.collector import TargetView, collect

    b, a = _load(_arg(d, before)), _load(_arg(d, after))
    return collect([TargetView(label="t", url="u", up=True, snapshot=a, derived=interval(b, a))], "5m")


def test_exposition_names_the_source_and_unit_of_every_number() -> None:
    text = _exposition(RECON / "simplecpu-0.33", "before.prom", "after-hit.prom")
    assert (
        'kvoffload_source_metric_info{target="t",signal="loaded",resolved_name="vllm:simple_kv_offload_load_blocks_total",'
        'unit="blocks"} 1.0' in text
    )
    assert (
        'kvoffload_backend_loaded_blocks_total{target="t",model_name="Qwen/Qwen3-0.6B",engine="0",tier="",'
        'connector=""} 8160.0' in text
    )
    assert 'kvoffload_backend_info{target="t",backend="simplecpu"} 1.0' in text
    assert 'kvoffload_state{target="t",model_name="Qwen/Qwen3-0.6B",engine="0",state="hit"} 1.0' in text
    # bytes per block only from the exposition's own factor: 16 GiB / 9362 capacity blocks
    assert (
        f'kvoffload_backend_block_size_bytes{{target="t",model_name="Qwen/Qwen3-0.6B",engine="0",basis="kv_offloading_size/capacity_blocks"}} {16 * 2**30 / 9362!r}'
        in text
    )
    assert "kvoffload_load_bytes_total" not in text  # no bytes invented for a blocks backend


def test_tiering_exposes_per_tier_drops_promotions_and_the_serving_tier() -> None:
    text = _exposition(RECON / "tiering-0.33", "before.prom", "after-hit.prom")
    lb = 'target="t",model_name="Qwen/Qwen3-0.6B",engine="0"'
    assert (
        f'kvoffload_backend_dropped_blocks_total{{{lb},tier="1:fs",connector="",reason="backpressure"}} 1024.0' in text
    )
    assert f'kvoffload_tier_promotions_total{{{lb},tier="1:fs",result="success"}} 10.0' in text
    assert f'kvoffload_prompt_tokens_cached_by_source_total{{{lb},source="disk"}} 40800.0' in text
    assert f'kvoffload_backend_promoted_bytes_total{{{lb},tier="1:fs",connector=""}}' in text
    assert f"kvoffload_tier_bytes{{{lb}}} 8589672448.0" in text  # the 1:fs info series has empty sizes


def test_cache_config_backend_label_alone_is_configured() -> None:
    """`--kv-offloading-backend lmcache` without a size (and before any LMCache family) is still offload."""
    from kvoffload_exporter.ingest.normalise import normalise

    body = (
        '# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{engine="0",kv_offloading_backend="lmcache",'
        'kv_offloading_size="None"} 1.0\n# TYPE vllm:prompt_tokens_total counter\n'
        'vllm:prompt_tokens_total{engine="0",model_name="m"} 0.0\n'
    )
    assert normalise(body).offload_configured
    assert not normalise(body.replace('"lmcache"', '"native"')).offload_configured


def test_text_output_names_the_native_units(capsys: pytest.CaptureFixture[str]) -> None:
    d = RECON / "simplecpu-0.33"
    assert main(["inspect", _arg(d, "before.prom"), _arg(d, "after-hit.prom")]) == 0
    out = capsys.readouterr().out
    assert "evidence Qwen/Qwen3-0.6B/0 (simplecpu): loaded 8,160 blocks; stored 8,192 blocks" in out


def test_negative_backend_counter_fails_the_poll_instead_of_poisoning_totals() -> None:
    from kvoffload_exporter.ingest.exposition import ParseError
    from kvoffload_exporter.ingest.normalise import normalise

    body = (RECON / "simplecpu-0.33" / "after-hit.prom").read_text()
    bad = body.replace(
        'vllm:simple_kv_offload_load_blocks_total{engine="0",model_name="Qwen/Qwen3-0.6B"} 8160.0',
        'vllm:simple_kv_offload_load_blocks_total{engine="0",model_name="Qwen/Qwen3-0.6B"} -1.0',
    )
    assert bad != body
    with pytest.raises(ParseError):
        normalise(bad)


def test_mooncake_store_never_counts_errored_puts_as_stored(capsys: pytest.CaptureFixture[str]) -> None:
    """An errored `save_put` still adds its bytes to `bytes_total{status="error"}`: those are drops (reason
    store_error, in calls), never stored bytes; every put of the window erroring reads not_storing with the
    reason naming the lost stores."""
    d = RECON / "mooncake-store-0.33"
    body = (d / "after-put-errors.prom").read_text()
    assert 'operation="save_put",status="error"} 1.5032385536e+10' in body  # the errored bytes are there
    doc = _inspect(capsys, str(d / "before.prom"), str(d / "after-put-errors.prom"))
    (engine,) = doc["engines"]
    assert (engine["state"], engine["state_reason"]) == ("not_storing", "store_errors")
    assert _delta(engine, backends.EvidenceKey(backends.Evidence.STORED, backends.NativeUnit.BYTES)) == 0.0
    dropped = backends.EvidenceKey(backends.Evidence.DROPPED, backends.NativeUnit.STORES, reason="store_error")
    assert _delta(engine, dropped) == 32.0
    hit = _inspect(capsys, str(d / "before.prom"), str(d / "after-hit.prom"))["engines"][0]
    assert hit["state"] == "hit"


@pytest.mark.parametrize(
    ("before", "after", "state", "reason", "stored", "loaded"),
    [
        ("before.prom", "after-hit.prom", "hit", None, 15032385536.0, 14973665280.0),
        # from the warm tier: stores into an empty one are the tier filling up (`storing`)
        ("after-cold.prom", "after-store-without-load.prom", "store_without_load", None, 11274289152.0, 0.0),
        ("before.prom", "after-put-errors.prom", "not_storing", "store_errors", 0.0, 0.0),
        # vLLM 0.33.0 also answers `partial_failure` (some keys refused) with the whole batch's bytes
        ("before.prom", "after-partial-puts.prom", "not_storing", "store_errors", 0.0, 0.0),
    ],
    ids=["hit", "store_without_load", "put_errors", "partial_puts"],
)
def test_mooncake_store_case_reads_right_with_inspect_json(
    capsys: pytest.CaptureFixture[str],
    before: str,
    after: str,
    state: str,
    reason: str | None,
    stored: float,
    loaded: float,
) -> None:
    """Each reconstructed Mooncake store case, read by `inspect --json BEFORE AFTER`: state, reason, and the
    stored / loaded bytes from the `ok` children only."""
    d = RECON / "mooncake-store-0.33"
    doc = _inspect(capsys, str(d / before), str(d / after))
    assert doc["backends"] == ["mooncake_store"]
    (engine,) = doc["engines"]
    assert engine["state"] == state
    if reason is not None:
        assert engine["state_reason"] == reason
    assert _delta(engine, backends.EvidenceKey(backends.Evidence.STORED, backends.NativeUnit.BYTES)) == stored
    assert _delta(engine, backends.EvidenceKey(backends.Evidence.LOADED, backends.NativeUnit.BYTES)) == loaded
    if reason == "store_errors":  # the failing puts are drops, in calls, whatever status they failed with
        dropped = backends.EvidenceKey(backends.Evidence.DROPPED, backends.NativeUnit.STORES, reason="store_error")
        assert _delta(engine, dropped) == 32.0


def test_mooncake_store_errored_put_bytes_are_never_stored_even_beside_good_puts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A window where some puts succeed and some fail: stored is the `ok` bytes alone (the errored batch's
    bytes, which vLLM adds to `status="error"`, are not), and the loss reads as `stores_dropped`."""
    d = RECON / "mooncake-store-0.33"
    after = (d / "after-put-errors.prom").read_text()
    ok = 'vllm:mooncake_store_operation_bytes_total{engine="0",model_name="Qwen/Qwen3-0.6B",operation="save_put",status="ok"}'
    assert ok not in after
    mixed = after.rstrip("\n") + "\n" + ok + " 1000.0\n"
    f = tmp_path / "mixed.prom"
    f.write_text(mixed)
    (engine,) = _inspect(capsys, str(d / "before.prom"), str(f))["engines"]
    assert _delta(engine, backends.EvidenceKey(backends.Evidence.STORED, backends.NativeUnit.BYTES)) == 1000.0
    dropped = backends.EvidenceKey(backends.Evidence.DROPPED, backends.NativeUnit.STORES, reason="store_error")
    assert _delta(engine, dropped) == 32.0


def test_every_backend_table_says_what_the_readme_table_shows_of_it() -> None:
    """The README's backend table is rendered from the tables: each names itself, its releases and where it
    is proven; every Backend value has a table, and the README carries each one's row."""
    from kvoffload_exporter.ingest.backends.resolve import TABLES

    assert {t.backend for t in TABLES} == set(backends.Backend)
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for t in TABLES:
        assert t.title and t.versions and t.evidence, t.backend
        assert f"(`{t.backend}`) | {t.versions} |" in readme, t.backend
