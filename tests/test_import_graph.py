"""`serve` imports only what it runs: the other sub-commands (the simulator, the canary check, the bundle,
`inspect`), the canary's engine when the canary is off and psutil without the host collector stay out of a
running exporter's memory (each module's code is resident for the life of the process; docs/performance.md,
"Memory per target")."""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import signal
import subprocess
import sys
from pathlib import Path

from support.net import free_port, wait_healthz

from kvoffload_exporter import commands

ROOT = Path(__file__).resolve().parents[1]
NOT_IN_SERVE = (
    *(f"kvoffload_exporter.commands.{c}" for c in ("bundle", "check", "demo", "inspect", "simulate")),
    "kvoffload_exporter.sim",  # the simulator (and prometheus_client's text helpers it borrows)
    "kvoffload_exporter.bundle",  # dashboards, rules, docs
    "kvoffload_exporter.canary.check",  # the `check` run, its report and evidence
    "kvoffload_exporter.canary.cycle",  # the canary engine: with --canary.enabled only
    "kvoffload_exporter.canary.expose",
    "kvoffload_exporter.canary.wire.client",
    "kvoffload_exporter.derive.intervalreport",  # `inspect`'s report
    "psutil",  # the host collector's: the test runs with --no-collector.host
    "pynvml",  # the GPU collector's: --no-collector.gpu
)
"""Packages and modules a `serve` without the canary never imports (a package: nothing under it either)."""


def test_each_command_module_registers_the_command_of_its_name() -> None:
    # cli.build_parser("serve") imports only commands/serve.py: the module must be named for its command.
    for m in pkgutil.iter_modules(commands.__path__):
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(f"{commands.__name__}.{m.name}").register(sub)
        assert list(sub.choices) == [m.name]


def test_a_running_serve_has_not_imported_the_other_commands(tmp_path: Path) -> None:
    out = tmp_path / "modules.txt"
    port = free_port()
    argv = ["serve", "--target", "http://127.0.0.1:9", "--web.listen-address", f"127.0.0.1:{port}"]
    argv += ["--no-collector.gpu", "--no-collector.host"]
    code = (
        "import atexit, sys\n"
        f"atexit.register(lambda: open({str(out)!r}, 'w').write('\\n'.join(sorted(sys.modules))))\n"
        "from kvoffload_exporter.cli import main\n"
        f"sys.exit(main({argv!r}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True)
    try:
        wait_healthz(proc, port)  # started, listening, the first poll sent
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0, proc.stderr.read() if proc.stderr else ""
    loaded = out.read_text().split()
    assert "kvoffload_exporter.server.exporter" in loaded  # it did run the exporter
    heavy = sorted(m for m in loaded if any(m == h or m.startswith(f"{h}.") for h in NOT_IN_SERVE))
    assert not heavy, f"serve imports modules it never runs: {heavy}"
