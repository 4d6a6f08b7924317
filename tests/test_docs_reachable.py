"""Every page of docs/ is reachable from the README through relative links, the README links the docs index,
every relative link resolves, and the repository carries the licence pyproject.toml declares."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _links(page: Path) -> list[Path]:
    out = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if "://" in target or target.startswith("mailto:"):
            continue
        out.append((page.parent / target).resolve())
    return out


def _reachable() -> set[Path]:
    seen: set[Path] = set()
    todo = [ROOT / "README.md"]
    while todo:
        page = todo.pop()
        if page in seen or not page.is_file() or page.suffix != ".md":
            continue
        seen.add(page)
        todo.extend(_links(page))
    return seen


def test_readme_links_the_docs_index():
    assert (ROOT / "docs/README.md").resolve() in _links(ROOT / "README.md")


def test_every_doc_is_reachable_from_the_readme():
    docs = {p.resolve() for p in (ROOT / "docs").rglob("*.md")}
    missing = sorted(str(p.relative_to(ROOT)) for p in docs - _reachable())
    assert not missing, f"not linked from README.md or docs/README.md: {missing}"


def test_the_docs_index_lists_every_page_of_docs():
    index = _links(ROOT / "docs/README.md")
    pages = {p.resolve() for p in (ROOT / "docs").rglob("*.md")} - {(ROOT / "docs/README.md").resolve()}
    assert not pages - set(index), sorted(str(p.relative_to(ROOT)) for p in pages - set(index))


def test_every_relative_link_resolves():
    broken = [f"{p.relative_to(ROOT)} -> {t}" for p in _reachable() for t in _links(p) if not t.exists()]
    assert not broken, broken


def test_license_file_is_the_apache_2_text_pyproject_declares():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text and len(text) > 11_000
    assert "include LICENSE" in (ROOT / "MANIFEST.in").read_text()


def test_simulator_doc_lists_every_simulated_backend_as_modelled():
    from kvoffload_exporter.sim.backends import BACKENDS

    text = (ROOT / "docs/simulator.md").read_text(encoding="utf-8")
    assert f"--backend {'|'.join(BACKENDS)}" in text
    for backend in BACKENDS:
        assert f"| `{backend}`" in text, backend
    not_modelled = text.split("Not modelled:", 1)[1].split("\n\n", 1)[0].lower()
    assert "tiering" not in not_modelled and "simplecpu" not in not_modelled


def test_readme_says_which_extra_bundle_needs() -> None:
    """`bundle` after the README's first install fails with "install the extra": the README says so first."""
    from kvoffload_exporter.commands import bundle

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    row = next(ln for ln in readme.splitlines() if ln.startswith("| `kvoffload-exporter bundle"))
    assert "kvoffload-exporter[bundle]" in row
    assert "kvoffload-exporter[bundle]" in (ROOT / "kvoffload_exporter" / "commands" / "bundle.py").read_text()
    assert bundle.register  # the command the row names


def test_deploy_page_counts_the_locked_wheels() -> None:
    lock = (ROOT / "deploy" / "requirements.lock").read_text(encoding="utf-8")
    pins = sum(1 for ln in lock.splitlines() if "==" in ln and not ln.lstrip().startswith("#"))
    assert f"`deploy/requirements.lock` ({pins} wheels" in (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")


def test_docs_index_and_readme_cite_the_same_concurrency_sweep() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    assert "`check --concurrency 1,4,16,32 --min-bursts 10`" in readme and "--concurrency 1,4,16,32`" in index
