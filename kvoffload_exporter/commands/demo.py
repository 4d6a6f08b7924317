"""`demo`: a simulated vLLM, synthetic traffic and the exporter in one process, with a live status line."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from dataclasses import replace

from kvoffload_exporter.commands.serve import add_exporter_arguments, config_from_args
from kvoffload_exporter.commands.simulate import (
    add_simulator_arguments,
    add_traffic_arguments,
    options_from_args,
    positive_seconds,
    traffic_from_args,
)
from kvoffload_exporter.config.flags import deprecations
from kvoffload_exporter.config.settings import ConfigError, TargetConfig, split_listen
from kvoffload_exporter.server import logs
from kvoffload_exporter.server.exporter import Exporter
from kvoffload_exporter.sim.simulator import Simulator
from kvoffload_exporter.variables import renamed_variables

ORDER = 5  # the README's first command

DEMO_DEFAULTS = {"poll_interval": "2", "window": "1m", "timeout": "1"}  # loopback: answers are fast


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "demo",
        help="try it: simulated vLLM + traffic + exporter, no GPU needed",
        description="Start a simulated vLLM server with a CPU offload tier, send it synthetic "
        "shared-prefix traffic and run the exporter against it, all on 127.0.0.1. "
        "Prints the URLs and one status line per engine; stop with Ctrl-C.",
    )
    p.add_argument("--duration", type=positive_seconds, metavar="SECONDS", help="stop after SECONDS (default: Ctrl-C)")
    p.add_argument(
        "--sim-listen",
        default="127.0.0.1:0",
        metavar="HOST:PORT",
        help="simulator listen address (default: a free port on 127.0.0.1)",
    )
    p.add_argument(
        "--status-interval",
        type=positive_seconds,
        default=5.0,
        metavar="SECONDS",
        help="seconds between status lines (default 5)",
    )
    add_simulator_arguments(p)
    add_traffic_arguments(p, old_rate_flag="--rate", rate=4.0)
    add_exporter_arguments(p, defaults=DEMO_DEFAULTS)
    p.set_defaults(func=run)


def _pct(v: float | None) -> str:
    return "  n/a" if v is None else f"{v:5.0%}"


def status_lines(exporter: Exporter, sim: Simulator, elapsed: float) -> list[str]:
    """One line per engine: the exporter's verdict plus the simulator's own tier fill."""
    lines = []
    views = {str(e["engine"]): e for e in sim.state()["engines"]}
    for target in exporter.targets:
        view = target.view
        if not view.up:
            why = view.last_error or "not polled yet"
            lines.append(f"[{elapsed:4.0f}s] {view.label}: exporter sees it down ({why})")
            continue
        for (_model, engine), d in sorted(view.derived.items()):
            tier = views.get(engine, {})
            p50 = d.ttft_quantiles.get(0.5)
            ttft = "n/a" if p50 is None else f"{p50 * 1e3:.0f} ms (n={d.ttft_count:.0f})"  # a quantile needs its n
            ratio = "  n/a" if d.load_store_ratio is None else f"{d.load_store_ratio:5.2f}"
            found = view.engines.get((_model, engine))
            reason = f" ({found.reason})" if found is not None and found.reason else ""
            lines.append(
                f"[{elapsed:4.0f}s] engine {engine}: state {(d.state if d.state_known else 'unknown') + reason:<18} "
                f"GPU cache hit {_pct(d.gpu_hit_ratio)} of prompt tokens  "
                f"CPU tier hit {_pct(d.external_hit_ratio)} of the GPU misses  load/store {ratio}  "
                f"TTFT p50 {ttft}  "
                f"tier {tier.get('cpu_chunks_used', 0)}/{tier.get('cpu_chunks', 0)} chunks"
            )
    return lines


class Shutdown:
    """Ctrl-C/SIGTERM: the first stops the demo, every later one is swallowed (shutdown is short, and a
    KeyboardInterrupt inside aiohttp's cleanup would print a traceback and lose the summary). The handlers
    stay installed until the loop closes; `started` tells `run` that an interrupt after that is part of
    the same shutdown (exit 0), not one before the servers were up (exit 130)."""

    def __init__(self) -> None:
        self.started = False
        self.stop = asyncio.Event()

    def install(self, duration: float | None) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.signalled)
        if duration is not None:
            loop.call_later(duration, self.signalled)

    def signalled(self) -> None:
        self.started = True
        self.stop.set()

    def release(self) -> None:
        """Hand the signals to the process as ignored before the loop closes: closing would give SIGINT back
        to Python, and a Ctrl-C while the interpreter tears down prints "Exception ignored ... Traceback"."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
                signal.signal(sig, signal.SIG_IGN)


class ListenError(OSError):
    """A listen address that cannot be bound, with the flag that sets it."""

    def __init__(self, flag: str, address: str, e: OSError):
        why = os.strerror(e.errno) if e.errno else (e.strerror or str(e))
        super().__init__(f"cannot listen on {address}: {why.lower()}; choose another with {flag} HOST:PORT")


async def _demo(args: argparse.Namespace, sim: Simulator, sim_host: str, sim_port: int, shutdown: Shutdown) -> int:
    from aiohttp import web

    from kvoffload_exporter.server.app import EXPORTER, make_app
    from kvoffload_exporter.sim.sender import TrafficReport, send
    from kvoffload_exporter.sim.server import start

    shutdown.install(args.duration)
    try:
        sim_runner, sim_url = await start(sim, sim_host, sim_port)
    except OSError as e:
        raise ListenError("--sim-listen", args.sim_listen, e) from e
    cfg = replace(
        config_from_args(args, command="demo"), targets=(TargetConfig(url=sim_url, name="sim"),), gpu_enabled=False
    )
    app = make_app(cfg)
    exp_runner = web.AppRunner(app, access_log=None)
    await exp_runner.setup()
    host, port = cfg.listen_host_port
    try:
        await web.TCPSite(exp_runner, host, port).start()
    except OSError as e:
        await exp_runner.cleanup()
        await sim_runner.cleanup()
        raise ListenError("--web.listen-address", f"{host}:{port}", e) from e
    exp_url = f"http://{host}:{exp_runner.addresses[0][1]}"
    spec = traffic_from_args(args, sim.config.max_model_len, duration=args.duration)
    print(
        f"kvoffload-exporter demo: simulated vLLM {sim.behaviour.text} ({sim.calibration.name}, "
        f"{len(sim.engines)} engine(s)) + {spec.rate:g} req/s shared-prefix traffic + exporter\n"
        f"  simulated vLLM   {sim_url}/metrics   (faults: {sim_url}/_sim/faults)\n"
        f"  exporter         {exp_url}{cfg.telemetry_path}   (status page: {exp_url}/)\n"
        f"  GPU prefix hits come first; CPU-tier hits once shared prefixes fall out of the "
        f"{sim.config.num_gpu_blocks * sim.config.block_size:,}-token GPU cache. Ctrl-C stops it.",
        flush=True,
    )
    report = TrafficReport()
    started = time.monotonic()

    async def main(stop: asyncio.Event) -> None:
        traffic = asyncio.create_task(send(sim_url, spec, api_key=sim.opts.api_key, report=report))
        while not stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), args.status_interval)
            if stop.is_set():
                break
            for line in status_lines(app[EXPORTER], sim, time.monotonic() - started):
                print(line, flush=True)
        traffic.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await traffic

    try:
        await main(shutdown.stop)
    finally:
        shutdown.started = True
        await exp_runner.cleanup()
        await sim_runner.cleanup()
    print(f"traffic: {report.summary()}", flush=True)
    shutdown.release()
    return 0


def run(args: argparse.Namespace) -> int:
    for key, value in DEMO_DEFAULTS.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    try:
        logs.setup(logs.from_args(args, "demo"))
        for line in deprecations() + renamed_variables(os.environ):  # a former flag or variable name
            logging.getLogger("kvoffload").warning("%s", line)
        sim_host, sim_port = split_listen(args.sim_listen)
        opts = options_from_args(args)
        errors = opts.check() + traffic_from_args(args, 8192, duration=args.duration).check()
        if errors:
            raise ValueError("; ".join(errors))
        config_from_args(args, command="demo")
        sim = Simulator(opts)
    except (ValueError, ConfigError) as e:
        print(f"kvoffload-exporter demo: {e}", file=sys.stderr)
        return 2
    shutdown = Shutdown()
    try:
        return asyncio.run(_demo(args, sim, sim_host, sim_port, shutdown))
    except KeyboardInterrupt:  # after shutdown began: part of it (exit 0); before: the conventional 128 + SIGINT
        return 0 if shutdown.started else 130
    except ListenError as e:
        print(f"kvoffload-exporter demo: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"kvoffload-exporter demo: {e.strerror or e}", file=sys.stderr)
        return 1
    finally:
        if shutdown.started:  # the loop gave SIGINT back to Python: one more Ctrl-C must not end it with 130
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
