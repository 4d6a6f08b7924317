"""Release hygiene: one version source, no machine paths in the repository, a changelog, no drift between
the committed generated files and `bundle`."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from kvoffload_exporter import __version__

ROOT = Path(__file__).resolve().parents[1]
BUNDLE_CHECK = [sys.executable, "-m", "kvoffload_exporter", "bundle", "--check", "--out"]

# Recorded evidence from other machines: its image tags are history, not this release's. Its machine paths
# were replaced by placeholders (<repo>, <store>, <out>), so the path check covers it like every other file.
RECORDED = ("docs/gpu-reference/", "tests/fixtures/")
# (file, exact text, why it is not a machine path)
ALLOWED_PATHS = {
    ("deploy/compose/compose.yaml", ":/" + "root/.cache/huggingface"): "inside the vLLM container (runs as root)",
}
MACHINE_PATH = re.compile(r"(?<![\w.~$}-])/(?:work|root|home|tmp)/[\w.\-/]*")


def _tracked() -> list[str]:
    r = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=False)
    if r.returncode != 0:
        pytest.fail("not a git checkout: these checks read the tracked files")
    return [p for p in r.stdout.decode().split("\0") if p]


def test_one_version_source() -> None:
    """kvoffload_exporter.__version__ feeds the package; the image tags and build argument must repeat it exactly."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" in project["project"]["dynamic"] and "version" not in project["project"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "kvoffload_exporter.__version__"}
    docker = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert re.findall(r"^ARG VERSION=(\S+)$", docker, re.M) == [__version__]
    compose = yaml.safe_load((ROOT / "deploy/compose/compose.yaml").read_text(encoding="utf-8"))
    image = compose["x-image"]
    assert image["image"] == f"kvoffload-exporter:${{KVOFFLOAD_EXPORTER_TAG:-{__version__}}}"
    assert image["build"]["args"]["VERSION"] == __version__
    (op,) = yaml.safe_load((ROOT / "deploy/kubernetes/sidecar/exporter-container.yaml").read_text(encoding="utf-8"))
    # Every image reference in the tracked text (docs, Dockerfile comments, manifests) names this version.
    tags = {
        (path, tag)
        for path in _tracked()
        if not path.startswith(RECORDED) and path.endswith((".md", ".yaml", ".yml", "Dockerfile"))
        for tag in re.findall(r"kvoffload-exporter:([0-9][\w.+-]*)", (ROOT / path).read_text(encoding="utf-8"))
    }
    assert {tag for _, tag in tags} == {__version__}, sorted(tags)
    assert op["value"]["image"] == f"kvoffload-exporter:{__version__}"


def test_no_absolute_machine_paths() -> None:
    found = []
    for path in _tracked():
        try:
            text = (ROOT / path).read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError):
            continue  # binary (PNG, gzip)
        for n, line in enumerate(text.splitlines(), 1):
            allowed = [t for (p, t) in ALLOWED_PATHS if p == path and t in line]
            for m in MACHINE_PATH.finditer(line):
                if not any(m.group(0) in t for t in allowed):
                    found.append(f"{path}:{n}: {m.group(0)}")
    assert not found, "absolute paths of a machine (use a relative path or a placeholder):\n" + "\n".join(found)


def test_machine_path_pattern_catches_what_it_must() -> None:
    work, tmp, home = ("/" + d for d in ("work/main", "tmp/kvo_store/site", "home/u"))  # not literal: see above
    hits = [m.group(0) for m in MACHINE_PATH.finditer(f"PYTHONPATH={work}:{tmp} ~/x {home}")]
    assert hits == [work, tmp, home]
    assert not MACHINE_PATH.search("http://127.0.0.1:8000/v1/models and deploy/compose/x and ${HOME}/tmp/x")


def test_calibration_cites_documents_in_the_repository() -> None:
    text = (ROOT / "kvoffload_exporter/sim/calibration.py").read_text(encoding="utf-8")
    cited = set(re.findall(r"\b((?:docs|tests/fixtures)/[\w./-]*\w)", text))
    assert {"docs/real-runs.md", "docs/simulator.md"} <= cited
    assert all((ROOT / c).exists() for c in cited), sorted(c for c in cited if not (ROOT / c).exists())
    # Every "real-runs §n" names the copy in docs/, and that section exists there.
    refs = re.findall(r"(\S*real-runs\S*) §(\d)", text)
    assert refs and all(doc.strip("`(") == "docs/real-runs.md" for doc, _ in refs), refs
    sections = set(re.findall(r"^## (\d)\. ", (ROOT / "docs/real-runs.md").read_text(encoding="utf-8"), re.M))
    assert {n for _, n in refs} <= sections


def test_changelog_follows_keep_a_changelog() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert text.startswith("# Changelog\n") and "keepachangelog.com" in text
    sections = re.findall(r"^## \[([^\]]+)\]", text, re.M)
    assert sections[0] == "Unreleased" and __version__ in sections
    unreleased = text.split("## [Unreleased]", 1)[1].split("\n## [", 1)[0]
    assert "\n### Metrics\n" in unreleased


def test_committed_generated_files_are_current() -> None:
    """The one drift test: every file `bundle` generates is committed exactly as it renders."""
    r = subprocess.run([*BUNDLE_CHECK, str(ROOT)], cwd=ROOT, capture_output=True, text=True, check=False)
    assert r.returncode == 0, f"regenerate with `kvoffload-exporter bundle --out .`:\n{r.stderr}"


def test_bundle_check_lists_the_files_that_differ(tmp_path: Path) -> None:
    """So the drift test above can fail: a changed and a missing file are both named, exit 1."""
    r = subprocess.run([*BUNDLE_CHECK, str(tmp_path)], capture_output=True, text=True, check=False)
    assert r.returncode == 1 and "stale: docs/metrics.md" in r.stderr
    subprocess.run(
        [sys.executable, "-m", "kvoffload_exporter", "bundle", "--out", str(tmp_path)], check=True, capture_output=True
    )
    assert subprocess.run([*BUNDLE_CHECK, str(tmp_path)], capture_output=True, check=False).returncode == 0
    (tmp_path / "docs/metrics.md").write_text("edited\n", encoding="utf-8")
    shutil.rmtree(tmp_path / "dashboards")
    r = subprocess.run([*BUNDLE_CHECK, str(tmp_path)], capture_output=True, text=True, check=False)
    assert r.returncode == 1
    stale = ["docs/metrics.md", "dashboards/kvoffload-overview.json", "dashboards/kvoffload-exporter-health.json"]
    assert sorted(r.stderr.splitlines()) == sorted(f"stale: {p}" for p in stale)
