"""KV moved between instances (Mooncake P2P, UMBP) and HiSparse's host-cache pages are exported per engine in
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
    # Mooncake P2P (histogram _sum) and UMBP (counter) bytes add up: two transports, one engine
    assert got["kvoffload_kv_transfer_bytes_total"] == 2 * 32 * PER
    assert got["kvoffload_kv_transfer_failures_total"] == 2 + 2
    before, after = (normalise(t) for t in texts)
    assert before.engines[0].evidence == after.engines[0].evidence  # nothing of it is tier evidence


async def test_hisparse_pages_and_host_to_device_bytes_are_exported_and_it_stays_not_configured() -> None:
    texts = [(HISPARSE / "before.prom").read_text(), (HISPARSE / "after-cold.prom").read_text()]
    body = (await run_chain(texts, "0.33.0")).body.decode()
    got = _values(body)
    assert got["kvoffload_hisparse_cache_hits_total"] == 3.6864e6
    assert got["kvoffload_hisparse_cache_misses_total"] == 507904.0
    assert got["kvoffload_hisparse_host_to_device_bytes_total"] == 1.8723373056e10
    assert 'state="not_configured"} 1.0' in body
    assert not normalise(texts[1]).offload_configured
