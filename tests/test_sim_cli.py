"""`simulate` and `demo` sub-commands end to end (short, time-scaled runs on 127.0.0.1)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from kvoffload_exporter.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]


def test_both_commands_are_registered() -> None:
    from kvoffload_exporter.commands import demo, simulate

    parser = build_parser()
    # Each name dispatches to its own module's `run` (a listing in the help text would not prove that).
    assert parser.parse_args(["simulate"]).func is simulate.run
    assert parser.parse_args(["demo"]).func is demo.run


def test_simulate_runs_for_a_duration(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "simulate",
            "--listen",
            "127.0.0.1:0",
            "--duration",
            "0.5",
            "--time-scale",
            "0.01",
            "--traffic-rate",
            "40",
            "--traffic-count",
            "6",
            "--seed",
            "1",
            "--vllm-version",
            "0.32.0",
            "--engines",
            "2",
            "--fault",
            "slow-load=2",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "simulated vLLM 0.32.0 (h200-qwen3-0.6b, 2 engine(s), CPU tier 8 GB)" in out
    assert "http://127.0.0.1:" in out and "traffic: 6 sent" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["--fault", "nope"],
        ["--vllm-version", "0.9.0"],
        ["--traffic-rate", "0"],
        ["--listen", "nowhere"],
        ["--engines", "0"],
        ["--offload-block-size", "24"],
    ],
)
def test_simulate_rejects_bad_options(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--duration", "0.1", *argv]) == 2
    assert "kvoffload-exporter simulate:" in capsys.readouterr().err


def test_simulate_options_reach_the_engine() -> None:
    from kvoffload_exporter.commands.simulate import options_from_args
    from kvoffload_exporter.sim.simulator import Simulator

    args = build_parser().parse_args(
        [
            "simulate",
            "--calibration",
            "h200-qwen3-32b",
            "--cpu-bytes",
            "4e9",
            "--num-gpu-blocks",
            "100",
            "--load-gbps",
            "10",
            "--no-connector",
        ]
    )
    sim = Simulator(options_from_args(args))
    assert sim.config.cpu_bytes == 4_000_000_000 and sim.config.num_gpu_blocks == 100
    assert sim.calibration.load_gbps == 10 and sim.calibration.prefill_ms_per_token == 0.09863
    assert sim.model == "Qwen/Qwen3-32B" and not sim.engines[0].connector


def test_demo_runs_for_a_duration(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "demo",
            "--duration",
            "2.5",
            "--web.listen-address",
            "127.0.0.1:0",
            "--status-interval",
            "1",
            "--time-scale",
            "0.05",
            "--traffic-rate",
            "30",
            "--poll.interval",
            "0.25",
            "--state.window",
            "2s",
            "--no-collector.host",
            "--seed",
            "4",
            "--log.level",
            "WARNING",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "simulated vLLM   http://127.0.0.1:" in out and "exporter         http://127.0.0.1:" in out
    assert "engine 0: state" in out and "traffic:" in out


def test_demo_stops_cleanly_on_ctrl_c() -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kvoffload_exporter",
            "demo",
            "--web.listen-address",
            "127.0.0.1:0",
            "--time-scale",
            "0.05",
            "--status-interval",
            "0.5",
            "--poll.interval",
            "0.25",
            "--state.window",
            "2s",
            "--no-collector.host",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    killer = threading.Timer(60, proc.kill)
    killer.start()
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "engine 0: state" in line:
                break
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
    finally:
        killer.cancel()
    assert proc.returncode == 0, "".join(lines) + rest
    assert "traffic:" in rest and "Traceback" not in rest
