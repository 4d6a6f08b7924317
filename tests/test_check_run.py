"""`check`'s three parts without a server or flags: the run returns a result, the document is built
from it, the evidence table decides the files."""

from __future__ import annotations

import io
import json
from pathlib import Path

from kvoffload_exporter.canary.check import checkreport, checkrun, evidence
from kvoffload_exporter.canary.config import CanarySettings
from kvoffload_exporter.canary.wire.protocol import Completion


class Down:
    """A transport whose target refuses every connection."""

    def __init__(self) -> None:
        self.completions = 0

    async def complete(self, base_url: str, body: dict[str, object]) -> Completion:
        self.completions += 1
        return Completion(error="connect")

    async def get(self, base_url: str, path: str) -> tuple[int | None, object]:
        return None, "connect: ClientConnectorError"

    async def metrics(self, base_url: str) -> str:
        raise AssertionError("no /metrics before /health answered")

    async def version(self, base_url: str) -> str | None:
        return None


async def _run() -> checkrun.CheckResult:
    req = checkrun.CheckRequest("http://gpu0:8000", rounds=3, settings=CanarySettings(), quiet=True)
    return await checkrun.run(req, Down(), checkrun.Keys(None, b"s" * 32), stderr=io.StringIO())


async def test_a_failed_preflight_is_a_result_not_an_exception() -> None:
    result = await _run()
    assert result.error is not None and result.error.startswith("preflight failed (health): ")
    assert result.engine.cycles == [] and result.after == {} and result.finished >= result.started
    doc = checkreport.document(result)
    assert doc["verdict"] == "error" and doc["exit_code"] == 3 and doc["why"] == result.error


async def test_the_bundle_is_the_table(tmp_path: Path) -> None:
    result = await _run()
    doc = checkreport.document(result)
    written = evidence.write_bundle(tmp_path, evidence.Evidence(result, doc, "text\n", {"rounds": 3}))
    # No snapshot was taken: the per-role rows write nothing, every other row exactly one file.
    assert [p.name for p in written] == [name for name, _ in evidence.FILES if "{role}" not in name]
    assert json.loads((tmp_path / "report.json").read_text()) == doc
    assert json.loads((tmp_path / "conditions.json").read_text())["argv"] == {"rounds": 3}
    assert (tmp_path / "requests.jsonl").read_text() == ""
    assert (tmp_path / "ttft.png").read_bytes().startswith(b"\x89PNG")
