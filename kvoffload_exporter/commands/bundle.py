"""`bundle`: render dashboards, Prometheus rules and Grafana alert provisioning for the user's labels."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from typing import TYPE_CHECKING

from kvoffload_exporter import PROJECT_URL
from kvoffload_exporter.saferead import FileRefused, read_regular
from kvoffload_exporter.safewrite import refusal, write_file

if TYPE_CHECKING:
    from kvoffload_exporter.bundle.settings import Settings

ORDER = 60


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "bundle",
        help="write Grafana dashboards, Prometheus/Grafana alert rules for your labels",
        description="Render the monitoring bundle (dashboards/*.json, alerts/*.yaml, Grafana alert "
        "provisioning, docs/metrics.md) into DIR. `--out .` in a checkout regenerates the "
        "committed files.",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="output directory (created if missing)")
    p.add_argument(
        "--selector",
        action="append",
        default=[],
        metavar="LABEL=VALUE",
        help="label matcher added to every PromQL selector, e.g. job=vllm-sidecar (also !=, =~, !~; repeatable)",
    )
    p.add_argument(
        "--runbook-url",
        metavar="URL",
        help="where you host alerts/runbook.md (written with the rules): each alert's runbook_url becomes the "
        f"clickable link URL#<alert in lower case> (default: the runbook the project publishes, an absolute URL: "
        f"{PROJECT_URL}/blob/main/alerts/runbook.md)",
    )
    p.add_argument(
        "--preset",
        metavar="NAME",
        help="apply a named list of --set values first: rehearsal (minute-scale windows for a staging "
        "rehearsal; docs/alerts.md)",
    )
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one alert setting, e.g. reuse_window=2h (repeatable; every key in docs/alerts.md)",
    )
    p.add_argument(
        "--grafana-datasource-uid",
        metavar="UID",
        help="Prometheus datasource uid for Grafana-managed alerts (default 'prometheus')",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if any file in DIR differs from what would be written",
    )
    p.set_defaults(func=run)


def _settings(args: argparse.Namespace) -> Settings:
    """--preset, then --set in order, then the dedicated flags (ValueError: one line for the user)."""
    from kvoffload_exporter.bundle.settings import DEFAULT

    settings = DEFAULT.preset(args.preset) if args.preset else DEFAULT
    settings = settings.with_sets(args.sets)
    if args.runbook_url:
        settings = replace(settings, runbook_url=args.runbook_url.rstrip("/"))
    if args.grafana_datasource_uid:
        settings = replace(settings, grafana_datasource_uid=args.grafana_datasource_uid)
    return settings


def run(args: argparse.Namespace) -> int:
    try:
        from kvoffload_exporter.bundle import render_bundle

        files = render_bundle(args.selector, _settings(args))
        files.update(_readme(args.out))
    except ImportError as e:
        print(
            f"kvoffload-exporter bundle: {e}; install the extra: pip install 'kvoffload-exporter[bundle]'",
            file=sys.stderr,
        )
        return 2
    except ValueError as e:
        print(f"kvoffload-exporter bundle: {e}", file=sys.stderr)
        return 2
    refused = None if args.check else next(filter(None, (refusal(rel, root=args.out) for rel in files)), None)
    if refused:  # before the first file: a bundle is written whole or not at all for a bad path
        print(f"kvoffload-exporter bundle: cannot write under {args.out}: {refused}", file=sys.stderr)
        return 2
    try:
        stale = _write_or_compare(files, args.out, args.check)
    except OSError as e:
        print(f"kvoffload-exporter bundle: cannot write under {args.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    if args.check:
        for rel in stale:
            print(f"stale: {rel}", file=sys.stderr)
        return 1 if stale else 0
    print(f"wrote {len(files)} files under {args.out}")
    return 0


def _readme(out: str) -> dict[str, str]:
    """DIR/README.md with its generated blocks re-rendered, when it has any (a checkout); else nothing."""
    from kvoffload_exporter.bundle.texts import readme

    text = _existing(os.path.join(out, readme.PATH))
    if text is None:
        return {}
    return {readme.PATH: readme.patch(text)} if readme.has_blocks(text) else {}


def _write_or_compare(files: dict[str, str], out: str, check: bool) -> list[str]:
    """Write every file under `out` or, with `check`, list those that differ."""
    stale = []
    for rel, text in files.items():
        path = os.path.join(out, rel)
        if check:
            if _existing(path) != text:  # missing, not a regular file, or different
                stale.append(rel)
            continue
        write_file(rel, text, root=out)  # never through a link planted under `out`
    return stale


MAX_EXISTING_BYTES = 16 << 20
"""A generated file is well under a MiB; what is larger is not one of ours."""


def _existing(path: str) -> str | None:
    """The text of a file already under DIR, or None: read as a regular file under a cap (a FIFO planted
    there is refused, never waited on)."""
    try:
        return read_regular(path, MAX_EXISTING_BYTES).decode("utf-8")
    except (FileRefused, UnicodeDecodeError):
        return None
