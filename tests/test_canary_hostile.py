"""`check` against hostile answers on a real loopback server: every case ends in a closed reason, the
report and the JSON are written with the error, and the API key appears in nothing stored or printed."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest

from kvoffload_exporter.cli import build_parser
from kvoffload_exporter.commands.check import run_check
from tests.support.hostile_canary import ECHO, KEY_ENCODINGS, Hostile, hostile_vllm

KEY = "sk-hostile-canary-0123456789"
BOUND = 60.0  # seconds: every case here ends well within it, or the test fails instead of hanging


async def _check(tmp_path: Path, h: Hostile, *argv: str) -> tuple[int, dict[str, Any], str, str]:
    (tmp_path / "key").write_text(KEY + "\n")
    args = build_parser().parse_args(
        [
            "check",
            "--target",
            h.url,
            "--settle",
            "0.01",
            "--secret-file",
            str(tmp_path / "secret"),
            "--api-key-file",
            str(tmp_path / "key"),
            "--allow-pressure",
            "--rounds",
            "1",
            "--json",
            str(tmp_path / "c.json"),
            "--out",
            str(tmp_path / "ev"),
            *argv,
        ]
    )
    out, err = io.StringIO(), io.StringIO()
    async with asyncio.timeout(BOUND):
        code, doc = await run_check(args, stdout=out, stderr=err, sleep=lambda s: asyncio.sleep(0))
    return code, doc, out.getvalue(), err.getvalue()


def _spellings() -> list[str]:
    """The key as each encoding writes it (base64 of a longer text: the characters that are the key's alone)."""
    out = [enc(KEY) for name, enc in KEY_ENCODINGS.items() if name not in ("json", "url", "base64_header")]
    return [*out, KEY, KEY_ENCODINGS["base64_header"](KEY)[-24:-4]]


def _no_key_anywhere(tmp_path: Path, *texts: str) -> None:
    for f in [*(tmp_path / "ev").iterdir(), tmp_path / "c.json"]:
        for spelled in _spellings():
            assert spelled.encode() not in f.read_bytes(), (f.name, spelled)
    for t in texts:
        for spelled in _spellings():
            assert spelled not in t, spelled


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("choices_object", "invalid"),
        ("deep", "too_deep"),
        ("deep_object", "too_deep"),
        ("usage_string", "invalid"),
        ("nan", "non_finite"),
        ("infinity", "non_finite"),
        ("overflow", "non_finite"),
        ("negative", "invalid"),
        ("negative_cached", "invalid"),
    ],
)
async def test_a_hostile_stream_is_a_closed_reason_with_report_and_json(tmp_path: Path, mode: str, reason: str) -> None:
    async with hostile_vllm(api_key=KEY) as h:
        h.set("/v1/completions", mode)
        code, doc, text, err = await _check(tmp_path, h)
    assert code == 3 and doc["verdict"] == "error", doc
    assert f": {reason} " in doc["why"], doc["why"]
    assert json.loads((tmp_path / "c.json").read_text())["why"] == doc["why"]
    assert "verdict: error (exit 3)" in (tmp_path / "ev" / "report.txt").read_text()
    assert doc["tokens_spent"] >= 0
    cycles = json.loads((tmp_path / "ev" / "cycles.json").read_text())
    assert cycles and all(c["reason"] == "error" for c in cycles)
    _no_key_anywhere(tmp_path, text, err)


async def test_negative_usage_never_makes_the_budget_negative(tmp_path: Path) -> None:
    async with hostile_vllm(api_key=KEY) as h:
        h.set("/v1/completions", "negative")
        code, doc, _, _ = await _check(tmp_path, h, "--budget-tokens-per-hour", "100000")
    assert code == 3 and 0 <= doc["tokens_spent"] <= 100000, doc


async def test_an_echoed_authorization_is_scrubbed_everywhere(tmp_path: Path) -> None:
    async with hostile_vllm(api_key=KEY) as h:
        h.set("/v1/completions", ECHO)
        code, doc, text, err = await _check(tmp_path, h)
    assert code == 3 and "refused the canary's completions with HTTP 400" in doc["why"], doc
    # the server's message is quoted: the echo visible, not its value
    assert "Authorization: Bearer <redacted>" in doc["why"]
    _no_key_anywhere(tmp_path, text, err, json.dumps(doc))


@pytest.mark.parametrize("encoding", sorted(KEY_ENCODINGS))
async def test_an_echoed_key_in_any_encoding_is_scrubbed_everywhere(tmp_path: Path, encoding: str) -> None:
    async with hostile_vllm(api_key=KEY) as h:
        h.set("/v1/completions", f"echo_key:{encoding}")
        code, doc, text, err = await _check(tmp_path, h)
    assert code == 3 and "refused the canary's completions with HTTP 400" in doc["why"], doc
    assert "<redacted>" in doc["why"]  # the echo is still visible as such, without its value
    names = {f.name for f in (tmp_path / "ev").iterdir()}
    assert {"report.json", "report.txt", "cycles.json"} <= names, names
    _no_key_anywhere(tmp_path, text, err, json.dumps(doc))


async def test_a_key_the_server_exposes_in_metrics_is_scrubbed_from_the_snapshots(tmp_path: Path) -> None:
    async with hostile_vllm(api_key=KEY) as h:
        h.set("/metrics", "metrics_echo")
        _, doc, text, err = await _check(tmp_path, h)
    assert (tmp_path / "ev" / "target_metrics_before.prom").exists()
    _no_key_anywhere(tmp_path, text, err, json.dumps(doc))


@pytest.mark.parametrize(("path", "mode"), [("/v1/models", "deep_json"), ("/v1/models", "models_object")])
async def test_a_hostile_preflight_answer_is_a_preflight_error(tmp_path: Path, path: str, mode: str) -> None:
    async with hostile_vllm(api_key=KEY) as h:
        h.set(path, mode)
        code, doc, text, err = await _check(tmp_path, h)
    assert code == 3 and "preflight failed (models)" in doc["why"], doc
    assert "verdict: error (exit 3)" in (tmp_path / "ev" / "report.txt").read_text()
    _no_key_anywhere(tmp_path, text, err)


async def test_a_run_that_raises_still_writes_the_report_and_the_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvoffload_exporter.canary.check import checkreport

    def broken(result: object) -> dict[str, Any]:
        raise KeyError("a field nothing foresaw")

    monkeypatch.setattr(checkreport, "document", broken)
    async with hostile_vllm(api_key=KEY) as h:
        code, doc, text, err = await _check(tmp_path, h)
    assert code == 3 and doc["why"] == "internal error (KeyError)", doc
    assert json.loads((tmp_path / "c.json").read_text())["exit_code"] == 3
    assert json.loads((tmp_path / "ev" / "report.json").read_text())["why"] == doc["why"]
    assert "verdict: error (exit 3)" in (tmp_path / "ev" / "report.txt").read_text()
    _no_key_anywhere(tmp_path, text, err)


async def test_a_preparation_that_raises_is_a_preflight_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kvoffload_exporter.canary.cycle import preflight

    async def broken(e: object) -> object:
        raise RecursionError("deep")

    monkeypatch.setattr(preflight, "conditions", broken)
    async with hostile_vllm(api_key=KEY) as h:
        code, doc, _, _ = await _check(tmp_path, h)
    assert code == 3 and "preflight failed (internal): preparation failed (RecursionError)" in doc["why"], doc
    assert (tmp_path / "ev" / "report.txt").exists() and (tmp_path / "c.json").exists()


@pytest.mark.parametrize("mode", ["deep_json", ECHO])
async def test_a_broken_version_leaves_the_target_usable(tmp_path: Path, mode: str) -> None:
    async with hostile_vllm(api_key=KEY) as h:
        h.set("/version", mode)
        code, doc, text, err = await _check(tmp_path, h)
    assert code != 3 and doc["rounds_completed"] >= 1, doc  # the rounds ran: only the version is unknown
    assert doc["conditions"]["target"]["version"] is None
    _no_key_anywhere(tmp_path, text, err)
