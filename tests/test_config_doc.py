"""docs/configuration.md is the settings declaration rendered: regenerate it when a setting changes."""

from __future__ import annotations

from pathlib import Path

from kvoffload_exporter.configdoc import render

DOC = Path(__file__).parent.parent / "docs" / "configuration.md"


def test_configuration_reference_is_up_to_date() -> None:
    assert DOC.read_text(encoding="utf-8") == render(), (
        "run: python -m kvoffload_exporter.configdoc > docs/configuration.md"
    )


def test_reference_names_every_key_flag_and_variable() -> None:
    text = render()
    for needle in ("`host.cgroup`", "`--web.listen-address`", "`KVOFFLOAD_CANARY_INTERVAL`", "`--wait-initial`"):
        assert needle in text
