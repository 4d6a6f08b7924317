"""`check`: the whole offload verification in one run — preflight, N canary rounds, verdict, evidence.

Exit codes: 0 offload effective (offload_faster), 1 ineffective (offload_slower or no_offload_hit),
2 inconclusive, 3 error. `--json FILE` holds the machine-readable verdict, `--out DIR` the evidence
bundle (both /metrics snapshots, every request, the conditions, the report and a TTFT plot).

This module is the flags; the procedure is canary.checkrun, the document canary.checkreport and the
files canary.evidence.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TextIO

from exporter.config import ConfigError

if TYPE_CHECKING:
    from exporter.canary.config import CanarySettings

ORDER = 35


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "check",
        help="verify end to end whether KV offloading pays off (canary rounds and a verdict)",
        description="Preflight (/health, /v1/models, /version, /metrics), N canary rounds, a second /metrics "
        "snapshot, then a verdict table and a TTFT plot. Exit 0: offload effective; 1: ineffective "
        "(slower than the control, or never hit); 2: inconclusive; 3: error.",
    )
    p.add_argument("--target", required=True, metavar="URL", help="vLLM base URL with the offload connector")
    p.add_argument("--rounds", type=int, default=10, metavar="N", help="canary cycles to complete (default 10)")
    p.add_argument(
        "--allow-pressure",
        action="store_true",
        help="displace the prefix with filler requests (evicts users' GPU cache: staging only); "
        "without it the wait strategy lets real traffic evict it",
    )
    p.add_argument("--json", metavar="FILE", help="write the verdict document here")
    p.add_argument("--out", metavar="DIR", help="write the evidence bundle into this directory")
    p.add_argument("--quiet", action="store_true", help="no live progress on stderr")
    from exporter.canary.config import CanarySettings
    from exporter.schema import add_flags

    add_flags(p, CanarySettings, "check", defaults=_base().public(), env=False)
    p.set_defaults(func=run)


def _base() -> CanarySettings:
    """check's own defaults: no budget unless asked, quick retries within one run."""
    from exporter.canary.config import CanarySettings

    return CanarySettings(enabled=True, budget_tokens_per_hour=None, backoff_initial=1.0, backoff_max=30.0)


def settings_from_args(args: argparse.Namespace) -> CanarySettings:
    """check's flags on its defaults, validated by the same declaration as serve's; errors name the flag."""
    from exporter.canary.config import CanarySettings, check
    from exporter.config import parse_targets
    from exporter.schema import Where, apply, overrides

    errors = [] if args.rounds >= 1 else ["--rounds: must be an integer >= 1"]
    targets = parse_targets([args.target], errors, Where("--target", dotted=False))
    if targets and targets[0].auth is not None:  # refused: check's outputs would carry the URL
        errors.append("--target: user:password@ is not supported by check (the canary uses --api-key-file)")
    elif targets:
        args.target = targets[0].url  # a trailing /metrics stripped, like serve
    values = overrides(CanarySettings, args, "check", errors)
    if errors:
        raise ConfigError(errors)
    settings = replace(
        apply(_base(), values),
        strategy="pressure" if args.allow_pressure else "wait",
        allow_pressure=bool(args.allow_pressure),
    )
    settings = replace(settings, max_samples=max(settings.min_samples, 1_000_000))
    check(settings)
    return settings


async def run_check(
    args: argparse.Namespace,
    stdout: TextIO = sys.stdout,
    stderr: TextIO = sys.stderr,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> tuple[int, dict[str, Any]]:
    """The procedure; returns (exit code, JSON document). Usable from a running event loop (tests).

    Flags → CheckRequest here; the run, the document and the files are canary.checkrun,
    canary.checkreport and canary.evidence.
    """
    from exporter.canary import checkreport, checkrun, evidence, report
    from exporter.canary.client import open_client
    from exporter.canary.secrets import SecretError

    try:
        settings = settings_from_args(args)
        keys = checkrun.load_keys(settings, stderr)
    except (ConfigError, SecretError) as e:
        print(f"kvoffload-exporter check: {e}", file=stderr)
        return 3, checkreport.error_document(str(e))
    req = checkrun.CheckRequest(target=args.target, rounds=args.rounds, settings=settings, quiet=args.quiet)
    async with open_client(keys.api_key, settings.request_timeout) as client:
        result = await checkrun.run(req, client, keys, stderr=stderr, sleep=sleep)
    doc = checkreport.document(result)
    text = report.text(doc)
    stdout.write(text)
    evidence.write(evidence.Evidence(result, doc, text, _public_argv(args)), args.json, args.out)
    return int(doc["exit_code"]), doc


def _public_argv(args: argparse.Namespace) -> dict[str, Any]:
    return {k: v for k, v in vars(args).items() if k != "func"}


def run(args: argparse.Namespace) -> int:
    try:
        code, doc = asyncio.run(run_check(args, stdout=sys.stdout, stderr=sys.stderr))
    except OSError as e:
        print(f"kvoffload-exporter check: {e}", file=sys.stderr)
        return 3
    if doc.get("verdict") == "error" and "conditions" in doc:  # settings errors were printed already
        print(f"kvoffload-exporter check: {doc['why']}", file=sys.stderr)
    return code


__all__ = ["register", "run", "run_check", "settings_from_args"]
