"""The sharding recipe on a real Prometheus: three probe-only exporter replicas share simulated vLLM servers
through the generated `file_sd` jobs (kvoffload_exporter.bundle.deployment.shards, `hashmod`), and a sidecar exporter
serves one more server on its own. Prometheus loads the bundle's rules (rehearsal preset: `for` 30 s).

Checked: every server is scraped exactly once across the replicas, fleet queries and the dashboards'
`target` variables see every shard, probe-only replicas report their shard in `kvoffload_targets_up`, no
monitoring alert is pending while all is well, and once one replica and the sidecar are killed
KVOffloadExporterDown fires for every server of the dead shard, for the dead replica's own `/metrics` and
for the sidecar, and for nothing else. Deadlines are generous polling bounds, never timed assertions.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("grafanalib")

from support.procs import stop_all

from kvoffload_exporter.bundle import render_bundle
from kvoffload_exporter.bundle.alerting.promql import template_free
from kvoffload_exporter.bundle.deployment import shards
from kvoffload_exporter.bundle.grafana import dashboards
from kvoffload_exporter.bundle.ruletests.testvalues import duration_ms
from kvoffload_exporter.bundle.settings import DEFAULT

PROMETHEUS = shutil.which("prometheus")
pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed (apt-get install prometheus)"),
]

ROOT = Path(__file__).resolve().parents[1]
REHEARSAL = DEFAULT.preset("rehearsal")
SERVERS = 8  # sharded over the replicas; one more is the sidecar's
REPLICAS = 3  # more than two: `hashmod` with a modulus the docs' two-replica example does not show
SIDECAR_JOB = "kvoffload-sidecar"
FOR_S = duration_ms(REHEARSAL.exporter_down_for) / 1000
SETTLE_S = 60.0  # bound for everything to be scraped once
FIRE_S = FOR_S + 60.0  # bound for the alert after the kill: its `for` plus evaluation and scrape slack


def _get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return bytes(r.read())


class Fleet:
    def __init__(self, tmp: Path, free_port: Callable[[], int]):
        self.tmp, self.free_port = tmp, free_port
        self.procs: list[subprocess.Popen[bytes]] = []
        self.prom = ""

    def spawn(self, name: str, args: list[str], ready: str) -> subprocess.Popen[bytes]:
        with open(self.tmp / f"{name}.log", "wb") as log:
            p = subprocess.Popen(
                args,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        self.procs.append(p)
        deadline = time.monotonic() + 30
        while True:
            assert p.poll() is None and time.monotonic() < deadline, f"{name} did not start\n{self.logs()}"
            try:
                _get(ready, 1.0)
                return p
            except (urllib.error.URLError, OSError):
                time.sleep(0.2)

    def simulator(self, i: int) -> str:
        port = self.free_port()
        args = [sys.executable, "-m", "kvoffload_exporter", "simulate", "--listen", f"127.0.0.1:{port}"]
        args += ["--time-scale", "0.1", "--no-noise", "--duration", "900", "--seed", str(i)]
        self.spawn(f"sim-{i}", args, f"http://127.0.0.1:{port}/health")
        return f"127.0.0.1:{port}"

    def exporter(self, name: str, cfg: dict[str, Any]) -> tuple[str, subprocess.Popen[bytes]]:
        port = self.free_port()
        base = {"poll_interval": 1, "window": "10s", "timeout": 1, "gpu": {"enabled": False}}
        (self.tmp / f"{name}.yaml").write_text(yaml.safe_dump({**base, **cfg}))
        args = [sys.executable, "-m", "kvoffload_exporter", "serve", "--config.file", str(self.tmp / f"{name}.yaml")]
        args += ["--web.listen-address", f"127.0.0.1:{port}"]
        p = self.spawn(f"exporter-{name}", args, f"http://127.0.0.1:{port}/healthz")
        return f"127.0.0.1:{port}", p

    def prometheus(self, jobs: list[dict[str, Any]]) -> None:
        port = self.free_port()
        (self.tmp / "rules.yaml").write_text(render_bundle(settings=REHEARSAL)["alerts/kvoffload.rules.yaml"])
        cfg = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(self.tmp / "rules.yaml")],
            "scrape_configs": jobs,
        }
        (self.tmp / "prometheus.yml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        assert PROMETHEUS
        args = [PROMETHEUS, f"--config.file={self.tmp / 'prometheus.yml'}", f"--storage.tsdb.path={self.tmp / 'tsdb'}"]
        args += [f"--web.listen-address=127.0.0.1:{port}", "--rules.alert.resend-delay=1s", "--log.level=warn"]
        self.prom = f"http://127.0.0.1:{port}"
        self.spawn("prometheus", args, f"{self.prom}/-/ready")

    def query(self, expr: str) -> list[dict[str, Any]]:
        body = json.loads(_get(f"{self.prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})))
        assert body["status"] == "success", (expr, body)
        return list(body["data"]["result"])

    def values(self, expr: str, label: str) -> dict[str, float]:
        return {r["metric"].get(label, ""): float(r["value"][1]) for r in self.query(expr)}

    def label_values(self, label: str, match: str) -> set[str]:
        url = f"{self.prom}/api/v1/label/{label}/values?" + urllib.parse.urlencode({"match[]": match})
        return set(json.loads(_get(url))["data"])

    def kill(self, p: subprocess.Popen[bytes]) -> None:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=10)

    def stop(self) -> None:
        stop_all(self.procs)

    def logs(self) -> str:
        return "\n".join(
            f"--- {f.name}\n{f.read_text(errors='replace')[-1200:]}" for f in sorted(self.tmp.glob("*.log"))
        )


def _target_variables() -> list[tuple[str, str, str, str]]:
    """(dashboard, variable, X, l) of every `label_values(X, l)` variable listing targets."""
    out = []
    for name, fn in dashboards.DASHBOARDS.items():
        for v in fn(())["templating"]["list"]:
            if v["type"] == "query" and v["name"] == "target":
                inner, label = v["definition"][len("label_values(") : -1].rsplit(",", 1)
                out.append((name, v["name"], inner, label.strip()))
    return out


def _wait(what: str, fleet: Fleet, bound_s: float, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + bound_s
    while not done():
        assert time.monotonic() < deadline, f"{what} not seen within {bound_s:g} s\n{fleet.logs()}"
        time.sleep(1.0)


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory, free_port: Callable[[], int]) -> Iterator[dict[str, Any]]:
    """Start the fleet, record what Prometheus sees while all is well, kill a replica and the sidecar, record
    the alerts they raise."""
    fleet = Fleet(tmp_path_factory.mktemp("shard-e2e"), free_port)
    out: dict[str, Any] = {}
    try:
        servers = {f"vllm-{i}": fleet.simulator(i) for i in range(SERVERS)}
        sidecar_server = fleet.simulator(SERVERS)
        probe_only = {"probe": {"allow_regex": r"http://127\.0\.0\.1:\d+"}}
        replicas = [fleet.exporter(f"replica-{i}", probe_only) for i in range(REPLICAS)]
        sidecar, sidecar_proc = fleet.exporter(
            "sidecar", {"targets": [{"url": f"http://{sidecar_server}", "name": "vllm-sidecar"}]}
        )
        sd = fleet.tmp / "vllm-targets.yaml"
        sd.write_text(yaml.safe_dump([{"targets": [a], "labels": {shards.NAME_LABEL: n}} for n, a in servers.items()]))
        jobs = shards.scrape_configs([a for a, _ in replicas], "file", [str(sd)], scrape_interval="1s")
        jobs.append({"job_name": SIDECAR_JOB, "static_configs": [{"targets": [sidecar]}]})
        fleet.prometheus(jobs)
        every = {*servers, "vllm-sidecar"}
        _wait(
            "every server scraped", fleet, SETTLE_S, lambda: set(fleet.values("kvoffload_up == 1", "target")) >= every
        )
        time.sleep(3 * FOR_S / 2)  # all is well for longer than the alerts' `for`
        out["servers"], out["sidecar"], out["replicas"] = servers, sidecar, [a for a, _ in replicas]
        out["count_by_target"] = fleet.values("count by (target) (kvoffload_up)", "target")
        out["up_by_target"] = fleet.values('count by (instance) (up{job=~"vllm-kvoffload-[0-9]+"})', "instance")
        out["shard_of"] = {
            r["metric"]["instance"]: r["metric"]["job"] for r in fleet.query('up{job=~"vllm-kvoffload-[0-9]+"}')
        }
        out["fleet_up"] = fleet.query("count(kvoffload_up == 1)")
        own = f'kvoffload_targets_up{{job=~"{shards.SELF_JOB}|{SIDECAR_JOB}"}}'
        out["targets_up"] = fleet.values(own, "instance")
        out["variables"] = {
            (name, var): fleet.label_values(label, template_free(inner))
            for name, var, inner, label in _target_variables()
        }
        out["before"] = fleet.query('ALERTS{alertname=~"KVOffloadExporter.*"}')

        counts: dict[str, int] = {}
        for job in out["shard_of"].values():
            counts[job] = counts.get(job, 0) + 1
        dead_job = max(counts, key=lambda j: counts[j])
        dead = int(dead_job.rsplit("-", 1)[1])
        out["dead_job"], out["dead_replica"] = dead_job, out["replicas"][dead]
        fleet.kill(replicas[dead][1])
        fleet.kill(sidecar_proc)
        firing = 'ALERTS{alertname="KVOffloadExporterDown",alertstate="firing"}'
        want = {t for t, j in out["shard_of"].items() if j == dead_job} | {out["dead_replica"], sidecar}
        _wait(
            "KVOffloadExporterDown for the dead replica and sidecar",
            fleet,
            FIRE_S,
            lambda: {r["metric"]["instance"] for r in fleet.query(firing)} >= want,
        )
        out["want_firing"] = want
        out["firing"] = [r["metric"] for r in fleet.query(firing)]
        yield out
    except BaseException:
        print(fleet.logs())
        raise
    finally:
        fleet.stop()


def test_every_server_is_scraped_exactly_once_across_the_replicas(observed):
    names = {*observed["servers"], "vllm-sidecar"}
    assert observed["count_by_target"] == dict.fromkeys(names, 1.0)  # one series per server: none lost, none doubled
    assert observed["up_by_target"] == dict.fromkeys(observed["servers"], 1.0)
    assert set(observed["shard_of"].values()) <= {f"vllm-kvoffload-{i}" for i in range(REPLICAS)}


def test_fleet_queries_and_dashboard_variables_see_every_shard(observed):
    names = {*observed["servers"], "vllm-sidecar"}
    assert float(observed["fleet_up"][0]["value"][1]) == len(names)
    # probe-only replicas report the shard they serve; the three exporters together serve every server
    assert sum(observed["targets_up"].values()) == len(names), observed["targets_up"]
    for i, replica in enumerate(observed["replicas"]):
        shard = [t for t, j in observed["shard_of"].items() if j == f"vllm-kvoffload-{i}"]
        assert observed["targets_up"].get(replica, 0.0) == len(shard), (replica, observed["targets_up"])
    assert observed["variables"], "no dashboard has a target variable"
    for key, values in observed["variables"].items():
        assert values >= names, key


def test_nothing_alerts_while_every_exporter_is_up(observed):
    assert observed["before"] == []


def test_a_killed_replica_and_sidecar_fire_exporter_down_for_exactly_what_they_served(observed):
    got = {(m["job"], m["instance"]) for m in observed["firing"]}
    assert {i for _, i in got} == observed["want_firing"]
    dead_shard = {t for t, j in observed["shard_of"].items() if j == observed["dead_job"]}
    assert {(observed["dead_job"], t) for t in dead_shard} <= got
    assert (shards.SELF_JOB, observed["dead_replica"]) in got and (SIDECAR_JOB, observed["sidecar"]) in got
