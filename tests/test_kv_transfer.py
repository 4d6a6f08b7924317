"""KV moved between instances (Mooncake P2P) and HiSparse's host-cache pages are exported per engine in
base units, and never read as offload evidence.

Why: an engine doing disaggregated prefill/decode or HiSparse read `not_configured` with every byte it moved
unseen; counting those bytes as stored/loaded would claim a tier that is not there.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from support.chain import run_chain
from support.prom import families

from kvoffload_exporter.ingest.normalise import normalise

ROOT = Path(__file__).resolve().parents[1]
KVT = ROOT / "tests" / "fixtures" / "kvtransfer"
HISPARSE = ROOT / "tests" / "fixtures" / "reconstructed" / "hisparse-0.33"
PER = 4096 * 114688


def _values(body: str) -> dict[str, float]:
    return {s.name: s.value for f in families(body) for s in f.samples}


def test_fixtures_are_regenerated_by_their_script() -> None:
    spec = importlib.util.spec_from_file_location("kvtransfer_make", KVT / "make.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert all(p.read_text() == text for p, text in mod.render().items()), (
        "run python tests/fixtures/kvtransfer/make.py"
    )


async def test_transfer_bytes_and_failures_are_exported_and_are_no_offload_evidence() -> None:
    texts = [(KVT / "before.prom").read_text(), (KVT / "after.prom").read_text()]
    body = (await run_chain(texts, "0.33.0")).body.decode()
    got = _values(body)
    # Mooncake P2P: the bytes-per-transfer histogram's _sum, the failed-transfer counter
    assert got["kvoffload_kv_transfer_bytes_total"] == 32 * PER
    assert got["kvoffload_kv_transfer_failures_total"] == 2
    before, after = (normalise(t) for t in texts)
    assert before.engines[0].evidence == after.engines[0].evidence  # nothing of it is tier evidence


def test_umbp_store_and_load_bytes_are_tier_evidence_not_transfers() -> None:
    """UMBP's counters carry `operation` = store / load to a pool this engine reads back (vLLM 0.33.0
    umbp/worker.py): stored and loaded bytes of a `umbp` backend, never KV-transfer bytes."""
    d = ROOT / "tests" / "fixtures" / "reconstructed" / "umbp-0.33"
    before, after = (normalise((d / f).read_text()) for f in ("before.prom", "after-hit.prom"))
    assert [str(b) for b in after.backends] == ["umbp"]
    delta = {k: v - before.engines[0].evidence.get(k, 0.0) for k, v in after.engines[0].evidence.items()}
    stored = next(v for k, v in delta.items() if k.signal == "stored" and k.unit == "bytes")
    loaded = next(v for k, v in delta.items() if k.signal == "loaded" and k.unit == "bytes")
    assert stored > 0 and loaded > 0
    assert "kv_transfer_bytes" not in {str(s) for s in after.engines[0].counters}


async def test_hisparse_pages_and_host_to_device_bytes_are_exported_and_it_stays_not_configured() -> None:
    texts = [(HISPARSE / "before.prom").read_text(), (HISPARSE / "after-cold.prom").read_text()]
    body = (await run_chain(texts, "0.33.0")).body.decode()
    got = _values(body)
    assert got["kvoffload_hisparse_cache_hits_total"] == 3.6864e6
    assert got["kvoffload_hisparse_cache_misses_total"] == 507904.0
    assert got["kvoffload_hisparse_host_to_device_bytes_total"] == 1.8723373056e10
    assert 'state="not_configured"} 1.0' in body
    assert not normalise(texts[1]).offload_configured
