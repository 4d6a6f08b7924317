"""`inspect` on a backend whose counters live on a second endpoint (KVBM, the LMCache MP server), given only
vLLM's file, says the second file is missing instead of a bare `not_configured` next to external hits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvoffload_exporter.cli import main

FIX = Path(__file__).parent / "fixtures" / "reconstructed"


def _run(capsys, *args: str) -> str:
    assert main(["inspect", *args]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(
    ("backend", "second", "says"),
    [
        ("kvbm-1.6.1", "kvbm-", "Dynamo KVBM"),
        ("lmcache-mp-0.33", "lmcache-server-", "LMCache MP server keeps the stored/loaded counters"),
    ],
)
def test_missing_second_file_is_named_and_joined_files_are_quiet(capsys, backend, second, says):
    d = FIX / backend
    alone = _run(capsys, str(d / "before.prom"), str(d / "after-hit.prom"))
    assert "missing second endpoint:" in alone and says in alone
    assert "before.prom+second-before.prom" in alone
    doc = json.loads(_run(capsys, str(d / "before.prom"), str(d / "after-hit.prom"), "--json"))
    assert says in doc["second_endpoint_missing"]
    joined = [f"{d / f}+{d / (second + f)}" for f in ("before.prom", "after-hit.prom")]
    assert "missing second endpoint" not in _run(capsys, *joined)
    assert json.loads(_run(capsys, *joined, "--json"))["second_endpoint_missing"] is None


def test_a_native_capture_needs_no_second_endpoint(capsys):
    d = FIX / "native-0.33"
    files = sorted(p.name for p in d.glob("*.prom"))
    doc = json.loads(_run(capsys, str(d / files[0]), "--json"))
    assert doc["second_endpoint_missing"] is None


def test_a_server_without_offload_and_without_external_hits_needs_none(capsys):
    doc = json.loads(_run(capsys, str(FIX / "A_v0.10-0.11.prom"), "--json"))
    assert doc["second_endpoint_missing"] is None
