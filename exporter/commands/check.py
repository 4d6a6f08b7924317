"""`check`: the whole offload verification in one run — preflight, N canary rounds, verdict, evidence.

Exit codes: 0 offload effective (offload_faster), 1 ineffective (offload_slower or no_offload_hit),
2 inconclusive, 3 error. `--json FILE` holds the machine-readable verdict, `--out DIR` the evidence
bundle (both /metrics snapshots, every request, the conditions, the report and a TTFT plot).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
import time
from dataclasses import asdict
from pathlib import Path
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


class _Progress:
    """Live progress: one line per round; on a terminal the current phase is redrawn in place."""

    def __init__(self, stream: TextIO, rounds: int, quiet: bool):
        self.stream, self.rounds, self.quiet = stream, rounds, quiet
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self.parts: list[str] = []
        self.done = 0

    def __call__(self, kind: str, obj: Any) -> None:
        if self.quiet:
            return
        if kind == "cycle_start":
            self.parts = []
        elif kind == "phase":
            ttft = f" {obj.ttft_seconds * 1000:.0f}ms" if obj.ttft_seconds is not None else ""
            self.parts.append(f"{obj.phase}:{obj.classification or 'done'}{ttft}")
            if self.tty:
                self.stream.write(f"\r\x1b[K round {self.done + 1}/{self.rounds}: " + " ".join(self.parts[-4:]))
                self.stream.flush()
        elif kind == "cycle":
            if obj.reason != "error":
                self.done += 1
            prefix = "\r\x1b[K" if self.tty else ""
            self.stream.write(
                f"{prefix}round {obj.cycle} ({self.done}/{self.rounds} done): {obj.result}, "
                f"{obj.reason}" + (f" - {obj.detail}" if obj.detail else "") + "\n"
            )
            self.stream.flush()


def _write(path: Path, data: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8")


def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)


async def run_check(
    args: argparse.Namespace, stdout: TextIO = sys.stdout, stderr: TextIO = sys.stderr, sleep: Any = asyncio.sleep
) -> tuple[int, dict[str, Any]]:
    """The procedure; returns (exit code, JSON document). Usable from a running event loop (tests)."""
    import aiohttp

    from exporter.canary import png, report
    from exporter.canary.client import CanaryClient
    from exporter.canary.engine import CanaryEngine, CanaryError
    from exporter.canary.plan import Prompts
    from exporter.canary.protocol import MetricsError
    from exporter.canary.secrets import SecretError, load_api_key, load_or_create_secret
    from exporter.commands.inspect import report as interval_report
    from exporter.exposition import ParseError
    from exporter.normalise import normalise

    try:
        settings = settings_from_args(args)
        api_key = load_api_key(settings.api_key_file, settings.api_key_env)
        try:
            secret = load_or_create_secret(settings.secret_file)
        except SecretError as e:
            if settings.secret_file:
                raise
            # A one-off check on a read-only home still works; its salt just differs from serve's.
            print(f"kvoffload-exporter check: {e}; using a one-off salt secret", file=stderr)
            secret = secrets.token_hex(32).encode()
    except (ConfigError, SecretError) as e:
        print(f"kvoffload-exporter check: {e}", file=stderr)
        return 3, {"verdict": "error", "exit_code": 3, "why": str(e)}
    prompts = Prompts(secret, secrets.token_hex(4), settings.id_range)
    progress = _Progress(stderr, args.rounds, args.quiet)
    started = time.time()
    error: str | None = None
    after_text: dict[str, str] = {}
    async with aiohttp.ClientSession(read_bufsize=1 << 20) as session:
        client = CanaryClient(session, api_key, request_timeout=settings.request_timeout)
        engine = CanaryEngine(
            args.target,
            settings,
            client,
            prompts,
            control_url=settings.control_target,
            progress=progress,
            max_samples=settings.max_samples,
            sleep=sleep,
        )
        try:
            cond = await engine.prepare()
        except CanaryError as e:
            error = f"preflight failed ({e.reason}): {e.detail}"
        if error is None:
            sz = cond.sizing
            if not args.quiet:
                print(
                    f"target {cond.target.url}: vLLM {cond.target.version or '?'}, model {cond.target.model}, "
                    f"offload metrics {cond.target.generation}; strategy {cond.strategy}, prompt "
                    f"{sz.prefix_tokens}+{sz.tail_tokens} tokens; ~{engine.cycle_cost():,} tokens per round",
                    file=stderr,
                )
            done = errors = 0
            while done < args.rounds and errors <= args.rounds:
                rec = await engine.run_cycle()
                if rec is None:
                    print(f"kvoffload-exporter check: token budget exhausted after {done} rounds", file=stderr)
                    break
                if rec.reason == "error":
                    errors += 1
                    # The plan is kept: a failed request does not change the server's shape.
                    await sleep(engine.backoff.failure(engine.retry_after))
                    continue
                done += 1
            if done == 0 and errors:
                error = f"every round failed ({errors}); last: {engine.cycles[-1].detail}"
            for role, url in (("target", engine.url), ("control", engine.control_url)):
                if url:
                    try:
                        after_text[role] = await client.metrics(url)
                    except MetricsError as e:  # the verdict stands without the closing snapshot
                        print(f"kvoffload-exporter check: final /metrics of {url} failed: {e}", file=stderr)
    state = engine.state
    phases = [asdict(p) for c in engine.cycles for p in c.phases]
    first_event: dict[str, list[float]] = {}
    for p in phases:
        if p["counted"] and p["ttft_first_event_seconds"] is not None:
            first_event.setdefault(p["path"], []).append(p["ttft_first_event_seconds"])
    cycles = [{k: v for k, v in asdict(c).items() if k != "phases"} for c in engine.cycles]
    interval: dict[str, Any] | None = None
    if "target" in engine.first_snapshot and "target" in after_text:
        try:
            interval = interval_report(normalise(engine.first_snapshot["target"]), normalise(after_text["target"]))
        except ParseError:  # evidence only
            interval = None
    extra = {
        "recompute_control": state.recompute_control,
        "bytes_per_token": state.bytes_per_token,
        "tokens_spent": state.tokens_spent,
        "offload_attempts": state.offload_attempts,
        "residency_seconds": dict(state.residency),
        "rounds_requested": args.rounds,
        "rounds_completed": sum(1 for c in engine.cycles if c.reason != "error"),
        "rounds_failed": sum(1 for c in engine.cycles if c.reason == "error"),
        "duration_seconds": round(time.time() - started, 3),
        "interval": interval,
    }
    doc = report.build(
        state.verdict,
        state.samples,
        first_event,
        phases,
        cycles,
        engine.conditions.as_dict() if engine.conditions else None,
        extra,
        error,
    )
    text = report.text(doc)
    stdout.write(text)
    plot = png.ttft_plot(
        {p: list(state.samples[p]) for p in state.samples}, f"kvoffload check {args.target} {doc['verdict']}"
    )
    if args.json:
        _write(Path(args.json), json.dumps(doc, indent=2, sort_keys=True) + "\n")
    if args.out:
        out = Path(args.out)
        for role, text_ in engine.first_snapshot.items():
            _write(out / f"{role}_metrics_before.prom", text_)
        for role, text_ in after_text.items():
            _write(out / f"{role}_metrics_after.prom", text_)
        _write(out / "requests.jsonl", _jsonl([asdict(r) for r in engine.requests]))
        _write(out / "phases.jsonl", _jsonl(phases))
        _write(out / "cycles.json", json.dumps(cycles, indent=2) + "\n")
        from exporter import __version__

        conditions = {
            "exporter_version": __version__,
            "argv": _public_argv(args),
            "settings": settings.public(),
            "conditions": doc["conditions"],
            "salt_fingerprint": prompts.fingerprint,
            "started": started,
        }
        _write(out / "conditions.json", json.dumps(conditions, indent=2, sort_keys=True, default=str) + "\n")
        _write(out / "report.txt", text)
        _write(out / "report.json", json.dumps(doc, indent=2, sort_keys=True) + "\n")
        _write(out / "ttft.png", plot)
    return doc["exit_code"], doc


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
