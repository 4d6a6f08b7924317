"""Recorded results: a finished run's folder -> a test fixture and the table rows of the reference doc.

    python tools/gpuref/record.py RUN_DIR FIXTURE_DIR --label 0.6b [--doc docs/gpu-reference/X.md]

RUN_DIR is what `run.sh` wrote. FIXTURE_DIR receives the product's document (`report.json`), its request
and phase records (gzipped), the harness's `clusters.json` recomputed from them, `summary.json` and the
target's last `/metrics`. With --doc, the rows between `<!-- gpuref:LABEL:begin -->` and
`<!-- gpuref:LABEL:end -->` are replaced by one row per level: the product's interval beside the harness's.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import clusters

HEADER = (
    "| shape | c | bursts A/B | product ΔTTFT ms [95 % CI] | product verdict "
    "| harness ΔTTFT ms [95 % CI] | width product/harness |\n|---|---|---|---|---|---|---|"
)


def _iv(side: Mapping[str, Any] | None) -> str:
    if not side or side.get("delta_ms") is None:
        return "–"
    lo, hi = side["ci95_ms"]
    return f"{side['delta_ms']:+.1f} " + (f"[{lo:+.1f}, {hi:+.1f}]" if lo is not None and hi is not None else "(none)")


def rows(label: str, result: Mapping[str, Any]) -> list[str]:
    out = []
    for r in result["levels"]:
        h, p = r["harness"], r["product"] or {}
        ratio = f"{r['width_ratio']:.2f}" if r["width_ratio"] is not None else "–"
        out.append(
            f"| {label} | {r['concurrency']} | {h['bursts_offload']}/{h['bursts_control']} | {_iv(p)} "
            f"| {p.get('verdict') or '–'} | {_iv(h)} | {ratio} |"
        )
    return out


def replace_rows(doc: str, label: str, new: Sequence[str]) -> str:
    """The doc with the rows between this label's markers replaced; ValueError when the markers are missing."""
    tag = re.escape(label)
    pat = re.compile(rf"(<!-- gpuref:{tag}:begin -->\n)(.*?)(<!-- gpuref:{tag}:end -->)", re.S)
    if not pat.search(doc):
        raise ValueError(f"no <!-- gpuref:{label}:begin/end --> markers")
    return pat.sub(lambda m: m.group(1) + "".join(x + "\n" for x in new) + m.group(3), doc)


def _gz(src: bytes, dest: Path) -> None:
    with gzip.GzipFile(dest, "wb", mtime=0) as f:  # mtime 0: the same bytes give the same file
        f.write(src)


def make_fixture(run: Path, fixture: Path) -> dict[str, Any]:
    """Copy what the tests replay; returns the analysis recomputed from the fixture itself."""
    fixture.mkdir(parents=True, exist_ok=True)
    with tarfile.open(run / "evidence.tgz") as tar:
        for name in ("requests.jsonl", "phases.jsonl", "report.json"):
            member = tar.extractfile(f"evidence/{name}")
            if member is None:
                raise ValueError(f"evidence.tgz has no {name}")
            data = member.read()
            if name == "report.json":
                (fixture / name).write_bytes(data)
            else:
                _gz(data, fixture / f"{name}.gz")
    with tarfile.open(run / "metrics.tgz") as tar:
        member = tar.extractfile("vllm_A_metrics.prom")
        if member is not None:
            (fixture / "vllm_A_metrics.prom").write_bytes(member.read())
    (fixture / "summary.json").write_bytes((run / "summary.json").read_bytes())
    result = clusters.analyze(fixture)
    (fixture / "clusters.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("run", type=Path, help="the folder run.sh wrote")
    p.add_argument("fixture", type=Path, help="fixture folder to (re)write")
    p.add_argument("--label", required=True, help="the shape's name in the table, e.g. 0.6b")
    p.add_argument("--doc", type=Path, help="markdown file with this label's row markers")
    a = p.parse_args(argv)
    try:
        result = make_fixture(a.run, a.fixture)
        new = rows(a.label, result)
        if a.doc:
            a.doc.write_text(replace_rows(a.doc.read_text(encoding="utf-8"), a.label, new), encoding="utf-8")
    except (OSError, ValueError, KeyError, tarfile.TarError) as e:
        print(f"record: {e}", file=sys.stderr)
        return 2
    print(HEADER)
    print("\n".join(new))
    return 0


if __name__ == "__main__":
    sys.exit(main())
