"""The resolver's caches change no evidence: a sample's key is the one its row and labels give, whatever
an earlier row at the same address left behind; long label sets are not held; the cache is bounded."""

from __future__ import annotations

import importlib

from kvoffload_exporter.ingest.backends.schema import Evidence, NativeUnit, Source

resolve_module = importlib.import_module("kvoffload_exporter.ingest.backends.resolve")

ROW = Source(
    "vllm:kv_offload_total_bytes_total", Evidence.STORED, NativeUnit.BYTES, match=(("transfer_type", "GPU_to_CPU"),)
)
OTHER = Source("vllm:kv_offload_total_bytes_total", Evidence.LOADED, NativeUnit.BYTES, tier_label="tier")
LABELS = (("transfer_type", "GPU_to_CPU"),)


def test_a_cached_key_is_the_rows_own_even_when_another_row_left_one_at_its_address() -> None:
    fresh = resolve_module._key(ROW, dict(LABELS))
    resolve_module._KEYS[(id(ROW), LABELS)] = (OTHER, resolve_module._key(OTHER, {"tier": "x"}))
    assert resolve_module._key_of(ROW, LABELS) == fresh
    assert resolve_module._key_of(ROW, (("transfer_type", "CPU_to_GPU"),)) is None  # match refuses it


def test_resolve_gives_the_same_evidence_cold_and_warm() -> None:
    raw = [
        ("vllm:kv_offload_total_bytes", "", LABELS, 5.0),
        ("vllm:kv_offload_total_bytes", "", (("transfer_type", "CPU_to_GPU"),), 3.0),
    ]
    rows = (ROW,)
    resolve_module._KEYS.clear()
    resolve_module._PREPARED.clear()
    cold = resolve_module.resolve(rows, raw)
    assert cold == resolve_module.resolve(rows, raw) == ({resolve_module._key(ROW, dict(LABELS)): 5.0}, {}, {})


def test_long_label_sets_are_not_held_and_the_cache_is_bounded() -> None:
    resolve_module._KEYS.clear()
    long = (("transfer_type", "GPU_to_CPU"), ("x", "y" * 2000))
    resolve_module._key_of(ROW, long)
    assert (id(ROW), long) not in resolve_module._KEYS
    for i in range(resolve_module._MAX_KEYS + 10):
        resolve_module._key_of(ROW, (("transfer_type", "GPU_to_CPU"), ("i", str(i))))
    assert 0 < len(resolve_module._KEYS) <= resolve_module._MAX_KEYS
