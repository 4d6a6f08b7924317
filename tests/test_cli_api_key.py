"""`check` against a server that wants an API key: a missing key and a wrong key are different problems."""

from __future__ import annotations

import io
from pathlib import Path

from kvoffload_exporter.cli import build_parser
from kvoffload_exporter.commands.check import run_check
from kvoffload_exporter.sim.server import start
from kvoffload_exporter.sim.simulator import SimOptions, Simulator


async def _why(tmp_path: Path, *argv: str) -> tuple[int, str, str]:
    runner, target = await start(Simulator(SimOptions(time_scale=0.2, seed=5, api_key="sk-right-0123")))
    try:
        args = build_parser().parse_args(
            ["check", "--target", target, "--rounds", "1", "--secret-file", str(tmp_path / "s"), *argv]
        )
        err = io.StringIO()
        code, doc = await run_check(args, stdout=io.StringIO(), stderr=err)
        return code, doc["why"], err.getvalue()
    finally:
        await runner.cleanup()


async def test_missing_and_wrong_api_key_are_told_apart(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("KVOFFLOAD_API_KEY", raising=False)
    code, why, _ = await _why(tmp_path)
    assert code == 3 and "needs an API key" in why
    (tmp_path / "key").write_text("sk-wrong-4567\n")
    code, why, err = await _why(tmp_path, "--api-key-file", str(tmp_path / "key"))
    assert code == 3 and "rejected the API key" in why and "needs an API key" not in why
    assert "sk-wrong" not in why + err
