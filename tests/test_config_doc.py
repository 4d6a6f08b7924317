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
    for needle in (
        "`host.cgroup`",
        "`--web.listen-address`",
        "`KVOFFLOAD_CANARY_INTERVAL`",
        "`--wait-initial`",
        "`--no-collector.gpu`",
    ):
        assert needle in text


def test_every_serve_flag_is_on_the_page_and_every_flag_on_the_page_exists() -> None:
    """The page claims to list every flag: held against `serve`'s own parser, both ways."""
    import argparse
    import re

    from kvoffload_exporter.config.flags import renamed
    from kvoffload_exporter.configdoc import serve_parser, setting_flags

    parser_flags = {
        o
        for a in serve_parser()._actions
        if a.help != argparse.SUPPRESS
        for o in a.option_strings
        if o.startswith("--") and o != "--help"
    }
    text = DOC.read_text(encoding="utf-8")
    assert "`--web.config.file`" in text and "`--web.enable-lifecycle`" in text
    missing = sorted(f for f in parser_flags if f"`{f}`" not in text)
    assert not missing, f"serve flags missing from docs/configuration.md: {missing}"
    on_page = set(re.findall(r"`(--[a-z][\w.-]*)`", text))
    hidden = {old for old, _ in renamed(serve_parser())}  # the renamed flags' table
    assert not sorted(on_page - parser_flags - setting_flags() - hidden), "flags on the page that no command takes"


def test_every_renamed_serve_flag_is_on_the_page_with_its_new_name() -> None:
    """The page's table of former spellings is the parser's hidden aliases, both ways."""
    from kvoffload_exporter.config.flags import renamed
    from kvoffload_exporter.configdoc import serve_parser

    pairs = renamed(serve_parser())
    assert ("--listen", "--web.listen-address") in pairs and ("--no-gpu", "--no-collector.gpu") in pairs
    text = DOC.read_text(encoding="utf-8")
    missing = [old for old, new in pairs if f"| `{old}` | `{new}` |" not in text]
    assert not missing, f"renamed serve flags missing from docs/configuration.md: {missing}"
