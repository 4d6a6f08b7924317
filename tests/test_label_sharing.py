"""Label parts are held once per process: the memory of 1,000 targets depends on it (docs/performance.md)."""

from __future__ import annotations

from kvoffload_exporter.ingest import samples
from kvoffload_exporter.ingest.samples import labels_reader


def test_label_sets_of_two_targets_share_their_parts() -> None:
    read = labels_reader(1024)
    a = read('model_name="m-1",engine="0",le="0.5"')
    b = read('engine="0",model_name="m-1",le="0.5"')  # another text, the same labels
    c = read('model_name="m-2",engine="0",le="0.5"')  # another target's model
    assert a == b and a[0] is b[0] and a[1] is b[1]
    assert c[1] is a[1]  # (("le", "0.5"),): one tuple for every target
    assert c[0] == ("m-2", "0")


def test_long_label_texts_are_not_held() -> None:
    text = 'model_name="' + "m" * 1100 + '",engine="0"'
    before = len(samples._SHARED)
    got = labels_reader(4096)(text)
    assert got[0] == ("m" * 1100, "0")
    assert all(got[0] is not held for held in samples._SHARED)
    assert len(samples._SHARED) == before  # nothing added


def test_the_table_is_bounded(monkeypatch) -> None:
    monkeypatch.setattr(samples, "_MAX_SHARED", 8)
    samples._SHARED.clear()
    samples._split.cache_clear()
    for i in range(50):  # a hostile target inventing label sets
        samples._split(f'model_name="m",engine="0",x="{i}"')
    assert len(samples._SHARED) <= 8
