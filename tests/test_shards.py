"""The generated scrape jobs of a sharded `/probe` fleet (kvoffload_exporter.bundle.deployment.shards): what docs/deploy.md
shows is what is generated, every N splits the servers into N disjoint shards, and the file_sd variant is a
configuration Prometheus accepts (tests/test_shard_e2e.py runs it)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from kvoffload_exporter.bundle import render_bundle
from kvoffload_exporter.bundle.deployment import shards
from kvoffload_exporter.bundle.settings import DEFAULT

ROOT = Path(__file__).resolve().parents[1]


def _committed(kind: str) -> list[dict[str, object]]:
    doc = yaml.safe_load((ROOT / f"{shards.DIR}/sharded-{kind}-sd.yaml").read_text())
    return list(doc["scrape_configs"])


def test_docs_show_the_generated_kubernetes_jobs():
    text = (ROOT / "docs/deploy.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "hashmod" in b)
    shown = yaml.safe_load(block)["scrape_configs"]
    jobs = _committed("kubernetes")
    assert shown == [jobs[0], jobs[-1]]


def test_committed_files_are_the_rendered_ones():
    files = render_bundle()
    for kind in ("kubernetes", "file"):
        path = f"{shards.DIR}/sharded-{kind}-sd.yaml"
        assert (ROOT / path).read_text() == files[path]


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_n_replicas_make_n_disjoint_shards_and_one_health_job(n):
    addresses = [f"replica-{i}:9466" for i in range(n)]
    jobs = shards.scrape_configs(addresses, "file", ["/x/*.yaml"])
    assert [j["job_name"] for j in jobs] == [*(f"vllm-kvoffload-{i}" for i in range(n)), shards.SELF_JOB]
    for i, job in enumerate(jobs[:-1]):
        steps = job["relabel_configs"]
        (mod,) = [s for s in steps if s.get("action") == "hashmod"]
        (keep,) = [s for s in steps if s.get("action") == "keep" and s["source_labels"] == ["__tmp_shard"]]
        assert mod["modulus"] == n and keep["regex"] == str(i)
        assert steps[-1] == {"target_label": "__address__", "replacement": addresses[i]}
    assert jobs[-1]["static_configs"] == [{"targets": addresses}]
    with pytest.raises(ValueError):
        shards.probe_job(n, n, "x:1")


def test_every_job_is_one_the_monitoring_alerts_watch():
    for kind in ("kubernetes", "file"):
        for job in _committed(kind):
            name = str(job["job_name"])
            assert re.fullmatch(DEFAULT.exporter_jobs, name), name


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_promtool_accepts_the_file_sd_jobs(tmp_path):
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(yaml.safe_dump({"scrape_configs": _committed("file")}))
    res = subprocess.run(["promtool", "check", "config", str(cfg)], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
