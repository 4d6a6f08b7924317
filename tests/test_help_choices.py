"""`--help` lists the values of every flag that takes one of a closed set (`--log.format text|logfmt|json`)."""

from __future__ import annotations

import pytest

from kvoffload_exporter.cli import _parsers, build_parser
from kvoffload_exporter.config.schema import described, specs
from kvoffload_exporter.config.settings import Config, TargetConfig
from kvoffload_exporter.server.logs import LogSettings

PARSERS = {p.prog.split()[-1]: p for p in _parsers(build_parser()) if " " in p.prog}


def _closed_flags() -> list[tuple[str, str, tuple[str, ...]]]:
    from kvoffload_exporter.canary.config import CanarySettings

    out = []
    for cls in (Config, TargetConfig, LogSettings, CanarySettings):
        for _f, spec in specs(cls):
            values = getattr(spec.parse, "choices", None)
            for command, names in spec.flags.items():
                if values and names:
                    out.append((command, names[0], tuple(values)))
    for command, p in PARSERS.items():
        for a in p._actions:
            if a.choices and not isinstance(a.choices, dict) and a.option_strings:
                out.append((command, a.option_strings[0], tuple(a.choices)))
    return out


def test_the_log_format_flag_lists_its_choices():
    help_text = " ".join(PARSERS["serve"].format_help().split())
    assert "--log.format FORMAT log line format (text, logfmt, json)" in help_text
    assert "log level (DEBUG, INFO, WARNING, ERROR)" in help_text


@pytest.mark.parametrize(("command", "flag", "values"), _closed_flags(), ids=lambda x: str(x))
def test_every_closed_set_flag_lists_every_value(command, flag, values):
    if command not in PARSERS:
        pytest.skip(f"no {command} subcommand")
    help_text = " ".join(PARSERS[command].format_help().split())
    section = help_text[help_text.index(flag, help_text.index("options:") if "options:" in help_text else 0) :]
    for v in values:
        assert v in section[:400], (command, flag, v)


def test_described_adds_values_only_for_closed_sets():
    specs_by_name = {f.name: s for f, s in specs(LogSettings)}
    assert described(specs_by_name["format"]).endswith("(text, logfmt, json)")
    timeout = next(s for f, s in specs(Config) if f.name == "timeout")
    assert described(timeout) == timeout.help


def test_bundle_help_names_the_absolute_runbook_url_default():
    """The rules link an absolute URL by default (docs/alerts.md), and --help says which."""
    from kvoffload_exporter.bundle.settings import DEFAULT, RUNBOOK_URL

    action = next(a for a in PARSERS["bundle"]._actions if "--runbook-url" in a.option_strings)
    assert DEFAULT.runbook_url == RUNBOOK_URL and RUNBOOK_URL.startswith("https://")
    assert RUNBOOK_URL in (action.help or "")
    assert "relative path" not in (action.help or "") and "not a link" not in (action.help or "")
