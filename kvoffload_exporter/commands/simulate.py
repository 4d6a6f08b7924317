"""`simulate`: run the built-in vLLM simulator (OpenAI API + `/metrics` of a chosen vLLM version)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from kvoffload_exporter.config.flags import Flag, deprecations, renamed_value
from kvoffload_exporter.config.schema import MAX_SECONDS, parse_duration
from kvoffload_exporter.config.settings import split_listen
from kvoffload_exporter.ingest.backends import Backend
from kvoffload_exporter.sim.backends import BACKEND_HELP, BACKENDS, FORMER_NAMES
from kvoffload_exporter.sim.calibration import CALIBRATIONS, DEFAULT_CALIBRATION
from kvoffload_exporter.sim.faults import FAULTS
from kvoffload_exporter.sim.output import DEPENDS_ON
from kvoffload_exporter.sim.simulator import SimOptions, Simulator
from kvoffload_exporter.sim.traffic import TrafficSpec
from kvoffload_exporter.sim.versions import DEFAULT_VERSION, PROFILE_VERSIONS

ORDER = 40

_ENGINE_FLAGS: tuple[tuple[str, Callable[[str], float], str], ...] = (
    ("block_size", int, "GPU KV block size in tokens"),
    ("num_gpu_blocks", int, "GPU KV cache blocks per engine (--num-gpu-blocks-override)"),
    ("max_model_len", int, "maximum prompt + output tokens"),
    ("offload_block_size", int, "CPU-tier chunk in tokens (the connector's block_size)"),
    ("cpu_bytes", lambda s: int(float(s)), "CPU tier size in bytes (cpu_bytes_to_use), e.g. 8e9"),
    ("kv_bytes_per_token", int, "KV bytes per token (default: from the calibration's model shape)"),
    ("gpu_memory_utilization", float, "value shown in vllm:cache_config_info"),
    (
        "store_report_delay_s",
        float,
        "report stores after this many seconds when no engine step comes (<= 0: only with the next step)",
    ),
)
_TIMING_FLAGS: tuple[tuple[str, str], ...] = (
    ("frontend_ms", "client TTFT outside the engine (HTTP, tokenise, SSE)"),
    ("step_ms", "engine step with (almost) nothing to prefill"),
    ("prefill_ms_per_token", "prefill cost per computed prompt token"),
    ("connector_ms", "OffloadingConnector cost on every request"),
    ("load_gbps", "CPU→GPU load bandwidth, GB/s"),
    ("store_gbps", "GPU→CPU store bandwidth, GB/s"),
    ("load_queue_ms", "asynchronous-load wait beyond the copy itself"),
    ("load_step_ms", "extra step after an asynchronous load"),
    ("queue_ms", "queue time of a request without a load"),
    ("itl_ms", "decode step (inter-token latency)"),
    ("jitter_ms", "scale of the TTFT noise (0: none)"),
    ("jitter_sigma", "log-normal shape of the TTFT noise"),
    ("lookup_us", "one CPU-tier lookup call, microseconds"),
    ("load_convoy", "0: concurrent revisits share one in-flight load; 1: serialised loads (vllm#44294)"),
    ("inflight_recompute", "share of blocks still being computed by another request that is prefilled again"),
)


def positive_seconds(v: str) -> float:
    """argparse type: a duration > 0 in the grammar of every command (plain seconds, or a Prometheus duration
    such as 90s or 1h30m; never NaN or inf, which would hang or crash the timers)."""
    try:
        x = parse_duration(v)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if not 0 < x <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"must be > 0 seconds and at most a year, got {v!r}")
    return x


def fraction(v: str) -> float:
    """argparse type: a number in [0, 1] (NaN refused)."""
    try:
        x = float(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {v!r}") from None
    if not 0 <= x <= 1:
        raise argparse.ArgumentTypeError(f"must be a fraction between 0 and 1, got {v!r}")
    return x


def backend_name(v: str) -> str:
    """argparse type of --backend: a former spelling (FORMER_NAMES) as the exporter's name, with one
    deprecation line; anything else as given (argparse's `choices` refuses what is unknown)."""
    return renamed_value("--backend", v, FORMER_NAMES[v]) if v in FORMER_NAMES else v


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_simulator_arguments(p: argparse.ArgumentParser) -> None:
    """Flags shared by `simulate` and `demo`."""
    p.add_argument(
        "--vllm-version",
        default=DEFAULT_VERSION,
        metavar="V",
        help=f"vLLM version to imitate, 0.10–0.33 (profiles: {', '.join(PROFILE_VERSIONS)}; default {DEFAULT_VERSION})",
    )
    p.add_argument("--engines", type=int, default=1, metavar="N", help="data-parallel engines (default 1)")
    p.add_argument(
        "--backend",
        default=Backend.NATIVE,
        type=backend_name,
        choices=BACKENDS,
        help="offload backend whose metrics are exposed, by the exporter's name for it (kvoffload_backend_info): "
        + ", ".join(f"{b} ({BACKEND_HELP[b]})" for b in BACKENDS),
    )
    p.add_argument("--model", metavar="NAME", help="served model name (default: the calibration's)")
    p.add_argument(
        "--calibration",
        default=DEFAULT_CALIBRATION,
        choices=sorted(CALIBRATIONS),
        help=f"time model and engine setup of a real run (default {DEFAULT_CALIBRATION})",
    )
    p.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="F",
        help="fault to start with, repeatable: " + "; ".join(f"{k}: {v}" for k, v in FAULTS.items()),
    )
    p.add_argument("--no-connector", action="store_true", help="serve without the OffloadingConnector")
    p.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        metavar="X",
        help="wall seconds per simulated second (0.1 runs ten times faster; default 1)",
    )
    p.add_argument("--seed", type=int, help="random seed (default: random)")
    p.add_argument("--no-noise", action="store_true", help="no TTFT noise: every request takes its modelled time")
    p.add_argument("--api-key", metavar="KEY", help="require 'Authorization: Bearer KEY' on /v1")
    p.add_argument(
        "--enable-prompt-tokens-details",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="usage.prompt_tokens_details.cached_tokens (default on, as in the H200 runs)",
    )
    p.add_argument(
        "--enable-per-request-metrics",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the response `metrics` object, vLLM 0.25+ (default on, as in the H200 runs)",
    )
    p.add_argument(
        "--output-depends-on",
        choices=DEPENDS_ON,
        default="prompt",
        help="greedy output tokens depend on the whole prompt (default), only on its last token like a model "
        "with dummy weights (equal answers then prove nothing), on nothing (random: every id random, a server that "
        "is not reproducible) or on the prompt and the time (drift: answers change every 25 requests)",
    )
    p.add_argument(
        "--corrupt-loads",
        type=fraction,
        default=0.0,
        metavar="FRACTION",
        help="this fraction of requests served from the CPU tier answer other tokens (the fault corrupt-loads)",
    )
    p.add_argument(
        "--show-hidden-metrics",
        action="store_true",
        help="like vLLM's --show-hidden-metrics-for-version: 0.11 keeps gpu_* names, 0.12–0.13 "
        "time_per_output_token_seconds",
    )
    eng = p.add_argument_group("engine (defaults come from --calibration)")
    for name, conv, text in _ENGINE_FLAGS:
        eng.add_argument(_flag(name), type=conv, metavar="N", help=text)
    tim = p.add_argument_group("time model (defaults come from --calibration)")
    for name, text in _TIMING_FLAGS:
        tim.add_argument(_flag(name), type=float, metavar="X", help=text)


def add_traffic_arguments(
    p: argparse.ArgumentParser, old_rate_flag: str = "--traffic", rate: float | None = None
) -> None:
    """The traffic generator's flags, spelt alike in `simulate` and `demo`; `old_rate_flag` is the command's
    former spelling of --traffic-rate (hidden, with one deprecation line)."""
    g = p.add_argument_group("traffic generator (loopback only)")
    # Any: keyword arguments of argparse's add_argument
    kw: dict[str, Any] = {"dest": "traffic", "action": Flag, "type": float}
    help_text = "requests per second, Poisson arrivals" + (f" (default {rate:g})" if rate else "")
    g.add_argument("--traffic-rate", default=rate, metavar="RATE", help=help_text, **kw)
    g.add_argument(
        old_rate_flag, use={old_rate_flag: "--traffic-rate"}, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kw
    )
    g.add_argument("--traffic-count", type=int, metavar="N", help="stop after N requests")
    g.add_argument(
        "--traffic-duration", type=positive_seconds, metavar="SECONDS", help="stop after SECONDS (default 3600)"
    )
    g.add_argument("--traffic-groups", type=int, default=12, metavar="N", help="shared-prefix groups (default 12)")
    g.add_argument("--traffic-zipf", type=float, default=1.1, metavar="S", help="group popularity exponent")
    g.add_argument("--traffic-prefix-tokens", type=int, default=2048, metavar="N", help="median prefix length")
    g.add_argument("--traffic-tail-tokens", type=int, default=96, metavar="N", help="median unique tail length")
    g.add_argument("--traffic-max-tokens", type=int, default=4, metavar="N", help="max_tokens per request")
    g.add_argument("--traffic-seed", type=int, default=0, metavar="N", help="workload seed (default 0)")


def options_from_args(args: argparse.Namespace) -> SimOptions:
    engine = {name: getattr(args, name) for name, _, _ in _ENGINE_FLAGS if getattr(args, name) is not None}
    timing = {name: getattr(args, name) for name, _ in _TIMING_FLAGS if getattr(args, name) is not None}
    return SimOptions(
        version=args.vllm_version,
        engines=args.engines,
        calibration=args.calibration,
        model=args.model,
        faults=tuple(args.fault) + ((f"corrupt-loads={args.corrupt_loads:g}",) if args.corrupt_loads > 0 else ()),
        connector=not args.no_connector,
        time_scale=args.time_scale,
        seed=args.seed,
        noise=not args.no_noise,
        api_key=args.api_key,
        prompt_tokens_details=args.enable_prompt_tokens_details,
        per_request_metrics=args.enable_per_request_metrics,
        show_hidden_metrics=args.show_hidden_metrics,
        output_depends_on=args.output_depends_on,
        backend=args.backend,
        engine=engine,
        timing=timing,
    )


def traffic_from_args(args: argparse.Namespace, max_prompt_tokens: int, duration: float | None = None) -> TrafficSpec:
    if args.traffic_count is None and args.traffic_duration is None and duration is None:
        duration = 3600.0  # always bounded
    return TrafficSpec(
        rate=args.traffic,
        count=args.traffic_count,
        duration=args.traffic_duration if args.traffic_duration is not None else duration,
        groups=args.traffic_groups,
        zipf=args.traffic_zipf,
        prefix_tokens=args.traffic_prefix_tokens,
        tail_tokens=args.traffic_tail_tokens,
        max_tokens=args.traffic_max_tokens,
        max_prompt_tokens=max_prompt_tokens,
        seed=args.traffic_seed,
    )


async def run_until_stopped(main: Callable[[asyncio.Event], Awaitable[None]], duration: float | None) -> None:
    """Run `main(stop)` until Ctrl-C, SIGTERM or `duration` seconds; `main` must return once `stop` is set."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    timer = loop.call_later(duration, stop.set) if duration is not None else None
    try:
        await main(stop)
    finally:
        if timer:
            timer.cancel()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "simulate",
        help="run a simulated vLLM server with a CPU offload tier",
        description="Serve vLLM's OpenAI API and /metrics from a simulated engine: prefix cache, "
        "OffloadingConnector CPU tier, a time model calibrated on real H200 runs, "
        "faults switchable at run time (GET/POST /_sim/faults).",
    )
    p.add_argument(
        "--listen",
        default="127.0.0.1:8000",
        metavar="HOST:PORT",
        help="listen address (default 127.0.0.1:8000; port 0 picks a free one)",
    )
    p.add_argument(
        "--duration", type=positive_seconds, metavar="SECONDS", help="stop after SECONDS (default: run until Ctrl-C)"
    )
    add_simulator_arguments(p)
    add_traffic_arguments(p)
    p.set_defaults(func=run)


async def _serve(args: argparse.Namespace, sim: Simulator, host: str, port: int) -> None:
    from kvoffload_exporter.sim.sender import TrafficReport, send
    from kvoffload_exporter.sim.server import start

    runner, url = await start(sim, host, port)
    cfg = sim.config
    report = TrafficReport()

    async def main(stop: asyncio.Event) -> None:
        # Said once Ctrl-C and SIGTERM are handled (run_until_stopped): from this line on they stop it, exit 0.
        print(
            f"simulated vLLM {sim.behaviour.text} ({sim.calibration.name}, {len(sim.engines)} engine(s), "
            f"{'CPU tier ' + format(cfg.cpu_bytes / 1e9, 'g') + ' GB' if cfg.connector else 'no connector'}) "
            f"serving {sim.model} on {url}  (metrics {url}/metrics, faults {url}/_sim/faults)",
            flush=True,
        )
        traffic = None
        if args.traffic:
            spec = traffic_from_args(args, cfg.max_model_len)
            traffic = asyncio.create_task(send(url, spec, api_key=sim.opts.api_key, report=report))
        await stop.wait()
        if traffic:
            traffic.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await traffic
            print(f"traffic: {report.summary()}", flush=True)

    try:
        await run_until_stopped(main, args.duration)
    finally:
        await runner.cleanup()


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for line in deprecations():  # a former flag spelling: which flag replaces it
        logging.getLogger("kvoffload").warning("%s", line)
    try:
        host, port = split_listen(args.listen)
        opts = options_from_args(args)
        errors = opts.check()
        if args.traffic is not None:
            errors += traffic_from_args(args, 8192).check()
        if errors:
            raise ValueError("; ".join(errors))
        sim = Simulator(opts)
    except ValueError as e:
        print(f"kvoffload-exporter simulate: {e}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_serve(args, sim, host, port))
    except OSError as e:
        print(f"kvoffload-exporter simulate: cannot listen on {args.listen}: {e.strerror or e}", file=sys.stderr)
        return 1
    return 0
