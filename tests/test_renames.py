"""The names settled before 0.1.0: every new name is one the exporter or its rules serve, no old one is, and the
names users already query stayed as they were."""

from __future__ import annotations

import json
from pathlib import Path

from kvoffload_exporter.bundle.alerting.rules import build
from kvoffload_exporter.bundle.settings import DEFAULT
from kvoffload_exporter.catalogue import CATALOGUE
from kvoffload_exporter.catalogue.backends import SIZED_UNITS
from kvoffload_exporter.catalogue.renames import RENAMES
from kvoffload_exporter.ingest.backends.resolve import SIGNAL_UNITS

ROOT = Path(__file__).resolve().parents[1]
KEPT = (
    "kvoffload_up",
    "kvoffload_state",
    "kvoffload_state_reason",
    "kvoffload_scrape_errors_total",
    "kvoffload_targets",
)
UNITS = sorted({str(u) for units in SIGNAL_UNITS.values() for u in units})


def _served() -> set[str]:
    records = {r.record for r in build(DEFAULT, ())[0]}
    return set(CATALOGUE) | records


def _expanded(new: str) -> set[str]:
    if "{unit_singular}" in new:
        return {new.format(unit_singular=str(u).removesuffix("s")) for u in SIZED_UNITS}
    if "{unit}" in new:
        return {new.format(unit=u) for u in UNITS}
    return {new}


def test_every_new_name_is_served_and_no_old_name_is() -> None:
    served = _served()
    for old, new in RENAMES.items():
        assert old not in served, old
        assert _expanded(new) & served, f"{old} -> {new}: no such name is served"


def test_a_split_family_is_served_in_every_unit_a_backend_counts_in() -> None:
    served = _served()
    assert {n for n in served if n.startswith("kvoffload_backend_stored_")} == {
        f"kvoffload_backend_stored_{u}_total" for u in ("bytes", "blocks", "chunks", "tokens")
    }


def test_no_served_name_stutters_or_carries_a_unit_label_on_a_measured_value() -> None:
    for name, m in CATALOGUE.items():
        assert not name.startswith("kvoffload_offload_"), name
        if "unit" in m.labels:  # only information series may name a unit
            assert m.type == "info", name


def test_the_names_users_query_kept_theirs() -> None:
    assert set(KEPT) <= set(CATALOGUE)
    assert not {o for o in RENAMES if o in KEPT or o.startswith("kvoffload_canary_")}


def test_the_json_table_is_the_catalogue_table() -> None:
    assert json.loads((ROOT / "docs" / "renames-0.1.0.json").read_text()) == RENAMES
