"""`check --out DIR`: the evidence bundle, one row of FILES per file; `--json FILE`: the document.

The table is the list of what a bundle holds (docs/canary.md lists the same files): a row's name
may contain `{role}`, then its renderer returns one text per role (target, control).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kvoffload_exporter import safewrite
from kvoffload_exporter.canary import png
from kvoffload_exporter.canary.checkrun import CheckResult, redact
from kvoffload_exporter.canary.secrets import scrub

log = logging.getLogger("kvoffload.canary")


@dataclass(frozen=True)
class Evidence:
    result: CheckResult
    doc: dict[str, Any]
    text: str  # the verdict table as printed
    argv: dict[str, Any]  # the flags as parsed (no secrets: keys come from files)


def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)


def _json(obj: object) -> str:
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


def _conditions(ev: Evidence) -> str:
    from kvoffload_exporter import __version__

    r = ev.result
    doc = {
        "exporter_version": __version__,
        "argv": ev.argv,
        "settings": r.request.settings.public(),
        "conditions": ev.doc["conditions"],
        "salt_fingerprint": r.prompts.fingerprint,
        "started": r.started,
    }
    return redact(json.dumps(doc, indent=2, sort_keys=True, default=str)) + "\n"  # no user:password@


def _plot(ev: Evidence) -> bytes:
    state = ev.result.engine.state
    samples = {p: list(state.samples[p]) for p in state.samples}
    title = f"kvoffload check {redact(ev.result.request.target)} {ev.doc['verdict']}"
    return png.ttft_plot(samples, title, sweep=ev.doc.get("load_sweep") or None)


Render = Callable[[Evidence], str | bytes | Mapping[str, str]]

FILES: tuple[tuple[str, Render], ...] = (
    ("{role}_metrics_before.prom", lambda ev: ev.result.engine.first_snapshot),
    ("{role}_metrics_after.prom", lambda ev: ev.result.after),
    ("requests.jsonl", lambda ev: _jsonl([asdict(r) for r in ev.result.engine.requests])),
    ("phases.jsonl", lambda ev: _jsonl(ev.result.phases())),
    ("cycles.json", lambda ev: json.dumps(ev.result.cycles(), indent=2) + "\n"),
    ("conditions.json", _conditions),
    ("report.txt", lambda ev: ev.text),
    ("report.json", lambda ev: _json(ev.doc)),
    ("ttft.png", _plot),
)


def _write(path: Path, data: str | bytes) -> None:
    """One file, written inside the directory (temp file + rename; a symlinked target is refused); text is
    scrubbed of secrets once more on the way out (the client already did)."""
    safewrite.write_file(path, data if isinstance(data, bytes) else scrub(data))


def write_bundle(out: Path, ev: Evidence) -> list[Path]:
    """Every file of FILES under `out`; returns the paths written. A file that cannot be rendered is
    left out (logged) rather than costing the others: the report and the JSON are always written."""
    written = []
    for name, render in FILES:
        try:
            data = render(ev)
        except Exception as e:  # one broken renderer must not lose the bundle
            log.warning("evidence %s not written: %s", name, type(e).__name__)
            continue
        items = data.items() if isinstance(data, Mapping) else [("", data)]
        for role, content in items:
            path = out / name.format(role=role)
            _write(path, content)
            written.append(path)
    return written


def write(ev: Evidence, json_path: str | None, out_dir: str | None) -> None:
    """`--json` and `--out`, each when given (OSError propagates: the command reports it)."""
    if json_path:
        _write(Path(json_path), _json(ev.doc))
    if out_dir:
        write_bundle(Path(out_dir), ev)


def write_error(doc: dict[str, Any], text: str, json_path: str | None, out_dir: str | None) -> None:
    """When the run itself failed: `--json`, and report.json and report.txt of the bundle."""
    if json_path:
        _write(Path(json_path), _json(doc))
    if out_dir:
        _write(Path(out_dir) / "report.json", _json(doc))
        _write(Path(out_dir) / "report.txt", text)


__all__ = ["FILES", "Evidence", "write", "write_bundle", "write_error"]
