"""`check`: the whole offload verification in one run — preflight, N canary rounds, verdict, evidence.

Exit codes follow the run's one advice (canary.advice.EXIT_CODES): 0 offload pays off (keep), 1 it does
not (disable or skip loads), 2 usage error (argparse, and output paths or target URLs refused before the
first request), 3 fix something first: the run could not measure (fix_target: preflight, a refused completion,
rounds failing past --retry-deadline; fix_control: a control serving another model; configure_offload: no
offload connector; fix_secret_file; report_bug) or the tier is misconfigured (grow_tier, check_connector),
4 inconclusive (measure_longer), 5 output mismatch (disable_offload: an offload hit answered other
tokens). `--json FILE` holds the machine-readable verdict, `--out DIR` the evidence bundle (both /metrics
snapshots, every request, the conditions, the report and a TTFT plot); `--concurrency` adds the load sweep.

This module is the flags; the procedure is canary.checkrun, the document canary.checkreport and the
files canary.evidence.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from kvoffload_exporter.config.settings import ConfigError

if TYPE_CHECKING:
    from kvoffload_exporter.canary.check.document import CheckDocument
    from kvoffload_exporter.canary.config import CanarySettings

ORDER = 35


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "check",
        help="verify end to end whether KV offloading pays off (canary rounds and a verdict)",
        description="Preflight (/health, /v1/models, /version, /metrics), N canary rounds, a second /metrics "
        "snapshot, then a verdict table and a TTFT plot. Exit codes follow the advice: 0 offload pays off; 1 it "
        "does not (slower than the control: disable or skip loads); 2 usage error (bad flags, output paths, target "
        "URL); 3 fix something first, the advice names what: the run could not measure (fix_target: unreachable "
        "target, preflight, completions refused or failing past --retry-deadline; fix_control: a control serving "
        "another model; configure_offload: no offload connector; fix_secret_file; report_bug) or the tier is "
        "misconfigured (it never stores or never loads: grow_tier, check_connector); 4 inconclusive (too few "
        "samples, interval includes 0, nothing displaced the "
        "prefix); 5 output mismatch (an offload hit answered other tokens than the same prompt from the GPU or "
        "recomputed: disable_offload, before every speed verdict).",
    )
    p.add_argument("--target", required=True, metavar="URL", help="vLLM base URL with the offload connector")
    p.add_argument(
        "--rounds",
        type=int,
        default=10,
        metavar="N",
        help="counted samples per path at most (default 10, or --min-samples when larger): the run stops at the "
        "first look that decides, from 5 counted samples a path on (a sequential design spends the error over the "
        "looks, so stopping early keeps the confidence); rounds that count nothing are repeated, up to 3 x the "
        "maximum",
    )
    p.add_argument(
        "--allow-pressure",
        action="store_true",
        help="displace the prefix with filler requests (evicts users' GPU cache: staging only); "
        "without it the wait strategy lets real traffic evict it",
    )
    p.add_argument(
        "--json",
        metavar="FILE",
        help="write the verdict document here (a regular file; - or /dev/stdout: standard output, and the "
        "report goes to stderr)",
    )
    p.add_argument("--out", metavar="DIR", help="write the evidence bundle into this directory")
    p.add_argument("--quiet", action="store_true", help="no live progress on stderr")
    p.add_argument(
        "--concurrency",
        type=_levels,
        metavar="C[,C...]",
        help="load sweep after the rounds: at each level C bursts of C concurrent revisits of an offloaded prefix "
        "vs the same with loads disabled, --min-bursts bursts per path (needs --allow-pressure; c=1 is the "
        "rounds themselves); with --prefix-tokens N,M,... it is a length sweep too (the rounds use the first "
        "length)",
    )
    p.add_argument(
        "--min-bursts",
        type=_min_bursts,
        default=10,
        metavar="N",
        help="load sweep: counted bursts per path and level at most (default 10, at least 5); a level stops at the "
        "first look that decides, from 5 bursts a path, and its rounds go to the levels still open; rounds that "
        "background traffic leaves uncounted are added (each burst is one observation)",
    )
    p.add_argument(
        "--retry-deadline",
        type=_deadline,
        default=None,
        metavar="DURATION",
        help="how long rounds that keep failing (5xx, 429, timeouts) are retried with back-off before check "
        "ends with exit 3 (default 45s); the same 4xx twice in a row ends it at once",
    )
    p.add_argument(
        "--allow-no-offload",
        action="store_true",
        help="measure even when preflight finds no offload metrics on the target (default: exit 3 at once)",
    )
    from kvoffload_exporter.canary.config import CanarySettings
    from kvoffload_exporter.config.flags import add_flags

    add_flags(p, CanarySettings, "check", defaults=_base().public(), env=False)
    p.set_defaults(func=run)


def _min_bursts(raw: str) -> int:
    try:
        n = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {raw!r}") from None
    if n < 5:
        raise argparse.ArgumentTypeError(
            "must be >= 5 (from 3 bursts a path a null effect is decided in 12-21 % of runs; 4 reach 95 % only "
            "at one level)"
        )
    return n


def _deadline(raw: str) -> float:
    from kvoffload_exporter.config.schema import parse_duration

    try:
        return parse_duration(raw)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _levels(raw: str) -> tuple[int, ...]:
    from kvoffload_exporter.canary.check.sweep import parse_levels

    try:
        return parse_levels(raw)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _prefix_lengths(raw: object, errors: list[str]) -> tuple[int, ...]:
    """`--prefix-tokens N` or `N,M,...` (a length sweep), each length read once by the setting's own parser;
    the rounds (and the settings) get the first."""
    from kvoffload_exporter.canary.config import CanarySettings
    from kvoffload_exporter.config.schema import specs

    if not isinstance(raw, str):
        return ()
    parse = next(spec.parse for f, spec in specs(CanarySettings) if f.name == "prefix_tokens")
    lengths: list[int] = []
    for part in (x.strip() for x in raw.split(",")):
        try:
            n = parse(part, True) if part else None
        except ValueError as e:
            errors.append(f"--prefix-tokens: {e}")
            return ()
        if isinstance(n, int):
            lengths.append(n)
    return tuple(lengths)


@dataclass(frozen=True)
class CheckInputs:
    """check's flags, each read once; the namespace argparse gave is never written."""

    settings: CanarySettings
    target: str  # as the canary addresses it: a trailing /metrics stripped
    sweep_lengths: tuple[int, ...]  # `--prefix-tokens N,M,...`: the length sweep's lengths (else empty)


def _base() -> CanarySettings:
    """check's own defaults: no budget unless asked, quick retries within one run."""
    from kvoffload_exporter.canary.config import CanarySettings

    return CanarySettings(enabled=True, budget_tokens_per_hour=None, backoff_initial=1.0, backoff_max=30.0)


def settings_from_args(args: argparse.Namespace) -> CanarySettings:
    """check's flags on its defaults, validated by the same declaration as serve's; errors name the flag."""
    return inputs_from_args(args).settings


def inputs_from_args(args: argparse.Namespace) -> CheckInputs:
    """The settings, the target and the sweep's lengths from check's flags; every error at once, by flag."""
    from kvoffload_exporter.canary.config import CanarySettings, check
    from kvoffload_exporter.config.flags import overrides
    from kvoffload_exporter.config.schema import Where, apply
    from kvoffload_exporter.config.settings import parse_targets

    errors = [] if args.rounds >= 1 else ["--rounds: must be an integer >= 1"]
    raw_lengths = getattr(args, "prefix_tokens", None)
    lengths = _prefix_lengths(raw_lengths, errors)
    target = args.target
    targets = parse_targets([args.target], errors, Where("--target", dotted=False))
    if targets and targets[0].auth is not None:  # refused: check's outputs would carry the URL
        errors.append("--target: user:password@ is not supported by check (the canary uses --api-key-file)")
    elif targets:
        target = targets[0].url  # a trailing /metrics stripped, like serve
    values = overrides(CanarySettings, argparse.Namespace(**{**vars(args), "prefix_tokens": None}), "check", errors)
    if lengths:
        values["prefix_tokens"] = lengths[0]
    if errors:
        raise ConfigError(errors)
    settings = replace(
        apply(_base(), values),
        strategy="pressure" if args.allow_pressure else "wait",
        allow_pressure=bool(args.allow_pressure),
    )
    settings = replace(settings, max_samples=max(settings.min_samples, 1_000_000))
    check(settings)
    sweep_lengths = lengths if isinstance(raw_lengths, str) and "," in raw_lengths else ()
    return CheckInputs(settings, target, sweep_lengths)


async def run_check(
    args: argparse.Namespace,
    stdout: TextIO = sys.stdout,
    stderr: TextIO = sys.stderr,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> tuple[int, CheckDocument]:
    """The procedure; returns (exit code, JSON document). Usable from a running event loop (tests).

    Flags → CheckRequest here; the run, the document and the files are canary.checkrun,
    canary.checkreport and canary.evidence.
    """
    from kvoffload_exporter.canary.check import checkreport, checkrun, evidence, progress, report
    from kvoffload_exporter.canary.check.advice import Action
    from kvoffload_exporter.canary.check.retries import DEFAULT_DEADLINE
    from kvoffload_exporter.canary.check.sweep import SweepRequest
    from kvoffload_exporter.canary.wire.client import open_client
    from kvoffload_exporter.canary.wire.secrets import SecretError, SecretPathError, scrub
    from kvoffload_exporter.config.flags import deprecations
    from kvoffload_exporter.redact import redact_url

    for line in deprecations():  # a former flag spelling: which flag replaces it
        print(f"kvoffload-exporter check: {line}", file=stderr)
    given = dict(vars(args))  # the flags as given: `args` itself is never written
    for dest, flag in (("target", "--target"), ("control_target", "--control-target")):
        url = given.get(dest)
        if isinstance(url, str) and (base := _without_v1(url)) != url:  # the OpenAI base URL, as clients know it
            print(
                f"kvoffload-exporter check: {flag} {progress.redact(redact_url(url))} ends in /v1: "
                f"using {progress.redact(redact_url(base))}",
                file=stderr,
            )
            given[dest] = base
    try:
        inputs = inputs_from_args(argparse.Namespace(**given))  # URLs included (config.parse_targets)
        settings = inputs.settings
        usage = _usage_errors(args)
        if usage:  # before the first request: nothing is spent on a run whose results cannot be written
            raise ConfigError(usage)
        keys = checkrun.load_keys(settings, stderr)
    except (ConfigError, SecretError) as e:
        print(f"kvoffload-exporter check: {progress.redact(str(e))}", file=stderr)
        code = 2 if isinstance(e, ConfigError | SecretPathError) else 3  # a bad flag value or path: usage
        action = Action.FIX_SECRET_FILE if isinstance(e, SecretError) else Action.FIX_TARGET  # 2: never written
        return code, {**checkreport.error_document(str(e), action), "exit_code": code}
    sweep = None
    if args.concurrency:
        sweep = SweepRequest(args.concurrency, inputs.sweep_lengths, args.min_bursts, settings.confidence)
        # One decision per run: every level's interval (c = 1 included) is simultaneous over the run's levels.
        settings = replace(settings, confidence=sweep.per_level_confidence)
    req = checkrun.CheckRequest(
        inputs.target,
        args.rounds,
        settings,
        quiet=args.quiet,
        sweep=sweep,
        allow_no_offload=args.allow_no_offload,
        retry_deadline=DEFAULT_DEADLINE if args.retry_deadline is None else args.retry_deadline,
    )
    try:  # whatever the target answered, the report and the JSON are written, with the error
        async with open_client(keys.api_key, settings.request_timeout) as client:
            result = await checkrun.run(req, client, keys, stderr=stderr, sleep=sleep)
        doc = checkreport.document(result)
        if result.interrupted:  # what was measured until Ctrl-C, marked: never read as a finished run
            doc["interrupted"], doc["exit_code"] = True, 130
        text = scrub(report.text(doc))
    except Exception as e:  # a bug or an answer nothing foresaw: exit 3, with the report
        doc = checkreport.error_document(f"internal error ({type(e).__name__})", Action.REPORT_BUG)
        print(f"kvoffload-exporter check: {scrub(str(doc['why']))}", file=stderr)
        evidence.write_error(doc, scrub(report.text(doc)), args.json, args.out, stdout)
        return 3, doc
    if result.ran:  # nothing ran (preflight failed): the one-line error on stderr is the whole answer
        (stderr if args.json in evidence.STDOUT else stdout).write(text)  # `--json -`: stdout is the JSON
    if doc.get("verdict") == "error":
        print(f"kvoffload-exporter check: {scrub(str(doc['why']))}", file=stderr)
    evidence.write(evidence.Evidence(result, doc, text, _public_argv(args)), args.json, args.out, stdout)
    return int(doc["exit_code"]), doc


def _without_v1(url: str) -> str:
    """`http://host:8000/v1` (the usual OpenAI base URL) → `http://host:8000`: check adds /v1/… itself."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:  # not a URL at all: settings_from_args refuses it in one line
        return url
    path = parts.path.rstrip("/")
    if not path.endswith("/v1"):
        return url
    return urlunsplit(parts._replace(path=path[: -len("/v1")]))


def _writable(directory: Path) -> str | None:
    """Why files cannot be written into `directory` (None when they can), found by doing it: the folder is
    created if missing and a probe file is created and removed. `os.access` says yes to /proc and to
    read-only mounts for root; a write does not."""
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".kvoffload-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return e.strerror or str(e)
    return None


def _usage_errors(args: argparse.Namespace) -> list[str]:
    """Output paths (and the sweep's precondition), checked before the first request (exit 2); the URLs
    were checked with the settings. A path that is a link, a device, a FIFO, a socket or a directory
    where a file goes is refused (canary.evidence.path_refusals); `--json -` is standard output."""
    from kvoffload_exporter.canary.check.evidence import STDOUT, path_refusals

    errors = path_refusals(args.json, args.out)
    if args.json and args.json not in STDOUT and not any(e.startswith("--json") for e in errors):
        p = Path(args.json)
        why = _writable(p.parent)
        if why or (p.exists() and not os.access(p, os.W_OK)):
            errors.append(f"--json: cannot write {p}: {why or 'not writable'}")
    if args.out and not any(e.startswith("--out") for e in errors):
        p = Path(args.out)
        why = _writable(p)
        if why:
            errors.append(f"--out: cannot write the bundle into {p}: {why}")
    if args.concurrency and not args.allow_pressure:
        errors.append("--concurrency: the load sweep displaces its prefixes with fillers: add --allow-pressure")
    return errors


def _public_argv(args: argparse.Namespace) -> dict[str, object]:
    return {k: v for k, v in vars(args).items() if k != "func"}


def run(args: argparse.Namespace) -> int:
    try:
        code, _ = asyncio.run(run_check(args, stdout=sys.stdout, stderr=sys.stderr))
    except OSError as e:
        print(f"kvoffload-exporter check: {e}", file=sys.stderr)
        return 3
    return code


__all__ = ["CheckInputs", "inputs_from_args", "register", "run", "run_check", "settings_from_args"]
