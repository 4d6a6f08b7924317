"""One family table (kvoffload_exporter.ingest.families) for both readers: every family normalise or a backend table
names is in it once, typed as that reader reads it, none is unread, and each sample name on the wire
belongs to one family only (so a line is matched once)."""

from __future__ import annotations

import ast
import importlib
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import fixture_text

from kvoffload_exporter.ingest import normalise, routes, signalmap
from kvoffload_exporter.ingest.exposition import selector
from kvoffload_exporter.ingest.families import (
    HISTOGRAMS,
    NATIVE_NAMESPACES,
    PREFIX,
    SPELLINGS,
    TABLE,
    FamilyType,
    Vllm,
    canonical,
)
from kvoffload_exporter.ingest.spellread import selectors

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
    assert set(normalise._SELECTORS[PREFIX].names) == set(owners)
    for sp in SPELLINGS:  # every spelling's selector reads every family, in that spelling only
        names = normalise._SELECTORS[sp].names
        assert {fam for fam, _ in names.values()} == set(TABLE)
        assert {n for n, (fam, _) in names.items() if canonical(n).startswith(PREFIX)} == {
            n for n in names if n.startswith(sp if not n.startswith(NATIVE_NAMESPACES) else "vllm_")
        }


def test_every_selected_family_has_one_route() -> None:
    assert set(routes.ROUTES) == set(TABLE)
    for fam, (evidence, handler) in routes.ROUTES.items():
        assert evidence == (fam in resolve.FAMILIES)
        assert (handler is not None) or fam in routes.INFO or evidence or fam in signalmap.ALIASES, fam


def test_an_alias_is_typed_as_its_current_family() -> None:
    assert {a: c for a, c in signalmap.ALIASES.items() if TABLE[a] is not TABLE[c]} == {}


@pytest.mark.parametrize(
    "current",
    [Vllm.KV_OFFLOAD_STORE_BYTES, Vllm.TIME_TO_FIRST_TOKEN_SECONDS, Vllm.NUM_REQUESTS_RUNNING, Vllm.CACHE_CONFIG_INFO],
    ids=["counter", "histogram", "gauge", "info"],
)
def test_a_renamed_family_of_any_type_is_one_alias_row(monkeypatch: pytest.MonkeyPatch, current: str) -> None:
    """A body that spells `current` by an old name reads as the body with the current name, once the old
    name is an alias row (and typed in the table): no reader needs code for it, histograms included."""
    old = current.replace("vllm:", "vllm:old_")
    body = fixture_text("h200-0.6b/A_05_after_cpu_tier_hit.prom")
    assert current + "{" in body or current + "_" in body
    monkeypatch.setitem(signalmap.ALIASES, old, current)
    monkeypatch.setattr(normalise, "_ALIASED", frozenset(signalmap.ALIASES))
    table = {**TABLE, old: TABLE[current]}
    hists = HISTOGRAMS | ({old} if current in HISTOGRAMS else set())
    monkeypatch.setattr(normalise, "_SELECTORS", selectors(tuple(sorted(table)), hists))
    want = normalise.normalise(body)
    got = normalise.normalise(body.replace(current, old))
    assert old in got.families and current in got.families  # read in the current one's place
    assert replace(got, families=want.families) == want


ALLOWED = ("ingest/families.py", "ingest/backends/", "sim/", "catalogue/")
"""Where a vLLM family name may be spelled: the family table, the backend tables, the simulator (it
plays vLLM) and the catalogue's HELP/source texts."""


def test_no_vllm_family_literal_outside_the_tables() -> None:
    package = Path(normalise.__file__).parent.parent
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel.startswith(ALLOWED):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("vllm:"):
                found.append(f"{rel}:{node.lineno}: {node.value!r}")
    assert found == [], "name the family by its symbol (kvoffload_exporter.ingest.families.Vllm)"
