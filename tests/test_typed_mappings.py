"""Few untyped mappings, each with its reason: `dict[str, Any]` / `Mapping[str, Any]` hide misspelt keys from
strict typing, so documents the package reads back are TypedDicts and what it only writes is `dict[str,
object]`. What is left (JSON of other tools read nested, keyword arguments of a library) says why, in a
`# Any:` comment on its line or the line above."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UNTYPED = re.compile(r"\b(dict|Dict|Mapping|MutableMapping)\[str,\s*Any\]")
LIMIT = 30


def _untyped() -> list[tuple[str, int, bool]]:
    """(module, line, has a reason) for every untyped mapping annotation of the package."""
    out = []
    for path in sorted((ROOT / "kvoffload_exporter").rglob("*.py")):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            code = line.split("#", 1)[0]
            for _ in UNTYPED.finditer(code):
                reason = "# Any:" in line or (i > 0 and lines[i - 1].strip().startswith("# Any:"))
                out.append((path.relative_to(ROOT).as_posix(), i + 1, reason))
    return out


def test_at_most_30_untyped_mappings() -> None:
    found = _untyped()
    assert 0 < len(found) <= LIMIT, f"{len(found)} dict/Mapping[str, Any] annotations (at most {LIMIT}): type them"


def test_every_untyped_mapping_says_why() -> None:
    silent = [f"{m}:{n}" for m, n, reason in _untyped() if not reason]
    assert not silent, f"dict/Mapping[str, Any] without a `# Any:` reason: {silent}"
