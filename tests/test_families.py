"""One family table (kvoffload_exporter.ingest.families) for both readers: every family normalise or a backend table
names is in it once, typed as that reader reads it, none is unread, and each sample name on the wire
belongs to one family only (so a line is matched once)."""

from __future__ import annotations

import importlib

from kvoffload_exporter.ingest import normalise, routes
from kvoffload_exporter.ingest.exposition import selector
from kvoffload_exporter.ingest.families import HISTOGRAMS, TABLE, FamilyType

resolve = importlib.import_module(
    "kvoffload_exporter.ingest.backends.resolve"
)  # the package re-exports a function of that name


def _backend_families() -> set[str]:
    return {r.family for r in resolve._ALL_ROWS} | {f for t in resolve.TABLES for f in t.detect}


def test_every_family_a_reader_names_is_in_the_table_and_none_is_unread() -> None:
    readers = set(normalise.FAMILIES) | _backend_families()
    assert readers - set(TABLE) == set(), "add these families to kvoffload_exporter/ingest/families.py"
    assert set(TABLE) - readers == set(), "no reader gives these families a meaning"


def test_the_table_types_a_family_as_its_readers_read_it() -> None:
    suffixed = {r.family for r in resolve._ALL_ROWS if r.suffix}
    assert suffixed <= HISTOGRAMS, "a backend row reads _sum/_count of a family not typed as a histogram"
    hist_handlers = {f for f, h in routes.HANDLERS.items() if h in (routes.on_hist, routes.on_legacy_size)}
    assert hist_handlers | set(normalise.PREFILL) <= HISTOGRAMS
    info_rows = {r.family for r in resolve._ALL_ROWS if r.kind.value == "info"}
    assert {f for f in info_rows if TABLE[f] is not FamilyType.INFO} == set()


def test_each_wire_name_belongs_to_one_family() -> None:
    owners: dict[str, set[str]] = {}
    for fam in TABLE:
        for name in selector((fam,), HISTOGRAMS).names:
            owners.setdefault(name, set()).add(fam)
    assert {n: f for n, f in owners.items() if len(f) > 1} == {}
    assert set(normalise._SELECTOR.names) == set(owners)


def test_every_selected_family_has_one_route() -> None:
    assert set(routes.ROUTES) == set(TABLE)
    for fam, (evidence, handler) in routes.ROUTES.items():
        assert evidence == (fam in resolve.FAMILIES)
        assert (handler is not None) or fam in routes.INFO or evidence, fam
