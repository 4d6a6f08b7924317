"""`check --out DIR`: the evidence bundle, one row of FILES per file; `--json FILE`: the document.

The table is the list of what a bundle holds (docs/canary.md lists the same files): a row's name
may contain `{role}`, then its renderer returns one text per role (target, control).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TextIO

from kvoffload_exporter import safewrite
from kvoffload_exporter.canary.check import png
from kvoffload_exporter.canary.check.checkrun import CheckResult
from kvoffload_exporter.canary.check.document import CheckDocument
from kvoffload_exporter.canary.check.progress import redact
from kvoffload_exporter.canary.wire.secrets import scrub

log = logging.getLogger("kvoffload.canary")


@dataclass(frozen=True)
class Evidence:
    result: CheckResult
    doc: CheckDocument
    text: str  # the verdict table as printed
    argv: dict[str, object]  # the flags as parsed (no secrets: keys come from files)


def _jsonl(rows: list[dict[str, object]]) -> str:
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

FILES: tuple[tuple[str, Render], ...] = (  # the order they are written in: the verdict first, the bulk last
    ("report.json", lambda ev: _json(ev.doc)),
    ("report.txt", lambda ev: ev.text),
    ("conditions.json", _conditions),
    ("cycles.json", lambda ev: json.dumps(ev.result.cycles(), indent=2) + "\n"),
    ("phases.jsonl", lambda ev: _jsonl(ev.result.phases())),
    ("requests.jsonl", lambda ev: _jsonl([asdict(r) for r in ev.result.engine.requests])),
    ("ttft.png", _plot),
    ("{role}_metrics_before.prom", lambda ev: ev.result.engine.first_snapshot),
    ("{role}_metrics_after.prom", lambda ev: ev.result.after),
)
ROLES = ("target", "control")
INCOMPLETE = "INCOMPLETE.txt"
"""Written into a bundle that could not be written whole (disk full, `ulimit -f`): what is missing and why."""
STDOUT = ("-", "/dev/stdout")
"""`--json` values that mean standard output: written to the open descriptor, never renamed over."""


class IncompleteBundle(OSError):
    """Some files of the bundle were not written; the rest were, and INCOMPLETE.txt says which."""


def path_refusals(json_path: str | None, out_dir: str | None) -> list[str]:
    """Output paths that would be refused (a link, a device, a FIFO, a socket, a directory where a file
    goes): `check` asks before its first request, so a bad path costs nothing."""
    errors = []
    if json_path and json_path not in STDOUT:
        why = safewrite.refusal(json_path)
        if why:
            why = why.removeprefix(f"{json_path} ")
            errors.append(f"--json: cannot write {json_path}: it {why} (--json - writes to standard output)")
    if out_dir:
        names = [n.format(role=r) for n, _ in FILES for r in (ROLES if "{role}" in n else ("",))] + [INCOMPLETE]
        for why in filter(None, (safewrite.refusal(n, root=out_dir) for n in names)):
            errors.append(f"--out: cannot write the bundle into {out_dir}: {why}")
            break
    return errors


def _write(path: Path, data: str | bytes) -> None:
    """One file, written inside the directory (temp file + rename; a symlinked or non-regular target is
    refused); text is scrubbed of secrets once more on the way out (the client already did)."""
    safewrite.write_file(path, data if isinstance(data, bytes) else scrub(data))


def write_bundle(out: Path, ev: Evidence) -> list[Path]:
    """Every file of FILES under `out`, in FILES' order; returns the paths written. A file that cannot be
    rendered is left out (logged) rather than costing the others. A file that cannot be written (disk
    full, `ulimit -f`) does not stop the rest either: INCOMPLETE.txt then lists what is missing and
    IncompleteBundle is raised; a complete bundle removes an INCOMPLETE.txt left by an earlier run."""
    written, failed = [], []
    for name, render in FILES:
        try:
            data = render(ev)
        except Exception as e:  # one broken renderer must not lose the bundle
            log.warning("evidence %s not written: %s", name, type(e).__name__)
            continue
        items = data.items() if isinstance(data, Mapping) else [("", data)]
        for role, content in items:
            path = out / name.format(role=role)
            try:
                _write(path, content)
            except OSError as e:
                failed.append((path.name, e.strerror or str(e)))
                continue
            written.append(path)
    if not failed:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(out / INCOMPLETE)
        return written
    reasons = sorted({why for _, why in failed})
    lines = [f"incomplete: {len(failed)} of {len(failed) + len(written)} files not written"]
    lines += [f"{name}: {why}" for name, why in failed]
    try:
        _write(out / INCOMPLETE, "\n".join(lines) + "\n")
        where = f"; see {out / INCOMPLETE}"
    except OSError:
        where = f"; {INCOMPLETE} could not be written either"
    raise IncompleteBundle(
        f"evidence bundle {out} incomplete: {len(failed)} of {len(failed) + len(written)} files not written "
        f"({', '.join(reasons)}){where}",
    )


def _write_json(doc: CheckDocument, json_path: str, stdout: TextIO | None) -> None:
    if json_path in STDOUT:
        out = stdout or sys.stdout
        out.write(scrub(_json(doc)))
        out.flush()
    else:
        _write(Path(json_path), _json(doc))


def write(ev: Evidence, json_path: str | None, out_dir: str | None, stdout: TextIO | None = None) -> None:
    """`--json` (first: the verdict survives a bundle that does not fit) and `--out`, each when given
    (OSError propagates: the command reports it, after the bundle was written: a `--json` over `ulimit -f`
    must not cost the bundle). `--json -` or `/dev/stdout` writes to `stdout`."""
    failed: OSError | None = None
    if json_path:
        try:
            _write_json(ev.doc, json_path, stdout)
        except OSError as e:
            if not out_dir:
                raise
            failed = e
    if out_dir:
        write_bundle(Path(out_dir), ev)
    if failed is not None:
        raise failed


def write_error(
    doc: CheckDocument, text: str, json_path: str | None, out_dir: str | None, stdout: TextIO | None = None
) -> None:
    """When the run itself failed: `--json`, and report.json and report.txt of the bundle."""
    if json_path:
        _write_json(doc, json_path, stdout)
    if out_dir:
        _write(Path(out_dir) / "report.json", _json(doc))
        _write(Path(out_dir) / "report.txt", text)


__all__ = [
    "FILES",
    "INCOMPLETE",
    "STDOUT",
    "Evidence",
    "IncompleteBundle",
    "path_refusals",
    "write",
    "write_bundle",
    "write_error",
]
