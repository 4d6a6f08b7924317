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
from typing import Any, TextIO

from exporter.config import ConfigError

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
    p.add_argument("--control-target", metavar="URL", help="the same model served without the connector")
    p.add_argument("--rounds", type=int, default=10, metavar="N", help="canary cycles to complete (default 10)")
    p.add_argument(
        "--allow-pressure",
        action="store_true",
        help="displace the prefix with filler requests (evicts users' GPU cache: staging only); "
        "without it the wait strategy lets real traffic evict it",
    )
    p.add_argument("--json", metavar="FILE", help="write the verdict document here")
    p.add_argument("--out", metavar="DIR", help="write the evidence bundle into this directory")
    p.add_argument("--model", metavar="NAME", help="model to probe (default: the first of /v1/models)")
    p.add_argument(
        "--prefix-tokens",
        type=int,
        metavar="N",
        help="shared prefix length (default: half the GPU cache from cache_config_info, <= 8192)",
    )
    p.add_argument(
        "--chunk-tokens",
        type=int,
        metavar="N",
        help="offload chunk in tokens (vLLM < 0.33 does not export it; default: align to 256)",
    )
    p.add_argument("--filler-tokens", type=int, metavar="N", help="tokens per filler request (default: prompt size)")
    p.add_argument(
        "--settle",
        default="0.5",
        metavar="SECONDS",
        help="wait after each probe and after its flush request before scraping (default 0.5)",
    )
    p.add_argument("--no-flush", action="store_true", help="no tiny flush request after probes")
    p.add_argument("--budget-tokens", type=int, metavar="N", help="hard cap on canary tokens per hour (default none)")
    p.add_argument("--wait-initial", default="30s", metavar="DURATION", help="wait strategy: first idle time")
    p.add_argument("--wait-max", default="30m", metavar="DURATION", help="wait strategy: longest idle time")
    p.add_argument(
        "--min-samples", type=int, default=10, metavar="N", help="samples per path needed for a verdict (default 10)"
    )
    p.add_argument("--seed", type=int, default=0, metavar="N", help="bootstrap seed (default 0)")
    p.add_argument("--timeout", default="120", metavar="SECONDS", help="per-request timeout (default 120)")
    p.add_argument("--api-key-file", metavar="FILE", help="API key file (else $KVOFFLOAD_API_KEY); never logged")
    p.add_argument(
        "--secret-file",
        metavar="FILE",
        help="canary salt secret (default ~/.local/state/kvoffload-exporter/canary-secret)",
    )
    p.add_argument("--no-recompute-control", action="store_true", help="skip the max_load_tokens: 0 control")
    p.add_argument("--quiet", action="store_true", help="no live progress on stderr")
    p.set_defaults(func=run)


_SETTINGS = {  # flag dest → canary settings key; validated by canary.config.from_mapping like serve's
    "settle": "settle",
    "wait_initial": "wait_initial",
    "wait_max": "wait_max",
    "timeout": "request_timeout",
    "prefix_tokens": "prefix_tokens",
    "chunk_tokens": "chunk_tokens",
    "filler_tokens": "filler_tokens",
    "budget_tokens": "budget_tokens_per_hour",
    "min_samples": "min_samples",
    "seed": "seed",
    "secret_file": "secret_file",
    "api_key_file": "api_key_file",
    "control_target": "control_target",
    "model": "model",
}


def settings_from_args(args: argparse.Namespace) -> Any:  # CanarySettings (imported lazily)
    from exporter.canary.config import CanarySettings, from_mapping

    errors = []
    for flag in ("rounds", "prefix_tokens", "chunk_tokens", "filler_tokens", "budget_tokens", "min_samples"):
        v = getattr(args, flag, None)
        if v is not None and v < 1:
            errors.append(f"--{flag.replace('_', '-')}: must be >= 1")
    if errors:
        raise ConfigError(errors)
    raw: dict[str, Any] = {key: getattr(args, dest) for dest, key in _SETTINGS.items()}
    raw.update(
        enabled=True,
        strategy="pressure" if args.allow_pressure else "wait",
        allow_pressure=args.allow_pressure,
        flush=not args.no_flush,
        recompute_control=not args.no_recompute_control,
        max_samples=max(args.min_samples, 1_000_000),
    )
    # check's own defaults: no budget unless asked, quick retries within one run.
    base = CanarySettings(budget_tokens_per_hour=None, backoff_initial=1.0, backoff_max=30.0)
    try:
        return from_mapping(raw, base)
    except ConfigError as e:  # name the flag, not the config key
        flags = {f"canary.{key}:": f"--{dest.replace('_', '-')}:" for dest, key in _SETTINGS.items()}
        raise ConfigError(
            [next((m.replace(k, f) for k, f in flags.items() if m.startswith(k)), m) for m in e.errors]
        ) from None


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
        code, _ = asyncio.run(run_check(args))
    except OSError as e:
        print(f"kvoffload-exporter check: {e}", file=sys.stderr)
        return 3
    return code


__all__ = ["register", "run", "run_check", "settings_from_args"]
