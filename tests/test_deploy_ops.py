"""Operator-facing properties of the Kubernetes files, rendered by `kubectl kustomize`.

The sidecar must never decide vLLM's readiness, must see vLLM's processes (shared PID namespace), the
PodMonitor variant must scrape exactly what the ServiceMonitor variant does, and the example
NetworkPolicy must let only Prometheus reach the exporter port. kubectl is needed for the variants
(`$patch: delete`, components outside the root); the patch files themselves are checked without it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvoffload_exporter.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy/kubernetes"
SIDECAR = "kvoffload-exporter"
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed (kubectl kustomize)")


def kustomize(directory: Path) -> list[dict[str, Any]]:
    assert KUBECTL
    r = subprocess.run([KUBECTL, "kustomize", str(directory)], check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def with_components(tmp_path: Path, base: str, *components: str) -> list[dict[str, Any]]:
    """Render `base` plus components, as a user's kustomization would (paths relative: kustomize refuses absolute)."""
    rel = os.path.relpath(K8S, tmp_path)
    doc = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [f"{rel}/{base}"],
        "components": [f"{rel}/{c}" for c in components],
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    return kustomize(tmp_path)


def kinds(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def pod_of(objs: list[dict[str, Any]]) -> tuple[dict[str, str], dict[str, Any]]:
    (dep,) = kinds(objs, "Deployment")
    return dep["spec"]["template"]["metadata"]["labels"], dep["spec"]["template"]["spec"]


def sidecar(pod: dict[str, Any]) -> dict[str, Any]:
    (side,) = [c for c in pod["containers"] if c["name"] == SIDECAR]
    return side


def container_port(pod: dict[str, Any], port: int | str) -> tuple[str, int]:
    """(container name, number) of a named or numbered port of any container in the pod."""
    for c in pod["containers"]:
        for p in c.get("ports", []):
            if port in (p.get("name"), p["containerPort"]):
                return c["name"], int(p["containerPort"])
    raise AssertionError(f"no container port {port!r}")


def listen_port(side: dict[str, Any]) -> int:
    cfg = yaml.safe_load((K8S / "sidecar/exporter.yaml").read_text())
    args = build_parser().parse_args(side["args"])
    assert args.command == "serve" and args.config.endswith("exporter.yaml")
    return int(str(cfg["listen"]).rsplit(":", 1)[1])


def test_sidecar_patch_has_liveness_but_no_readiness_probe():
    """A pod is ready only when every container is: an exporter readiness probe would drain vLLM from its
    Service whenever the exporter is down (an OOM kill at the 256 Mi limit)."""
    (op,) = yaml.safe_load((K8S / "sidecar/exporter-container.yaml").read_text())
    side = op["value"]
    assert "readinessProbe" not in side and "startupProbe" not in side
    assert side["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_sidecar_component_shares_the_process_namespace():
    patch = yaml.safe_load((K8S / "sidecar/exporter-volumes.yaml").read_text())
    assert patch["spec"]["template"]["spec"]["shareProcessNamespace"] is True


@needs_kubectl
def test_rendered_example_pod_has_no_exporter_readiness_and_a_shared_pid_namespace():
    _labels, pod = pod_of(kustomize(K8S / "example"))
    assert pod["shareProcessNamespace"] is True
    side = sidecar(pod)
    assert "readinessProbe" not in side and "livenessProbe" in side
    assert container_port(pod, side["livenessProbe"]["httpGet"]["port"]) == (SIDECAR, listen_port(side))
    vllm = next(c for c in pod["containers"] if c["name"] == "vllm")
    assert "readinessProbe" in vllm, "vLLM keeps its own readiness"


@needs_kubectl
def test_podmonitor_variant_replaces_service_and_servicemonitor():
    service_variant = kustomize(K8S / "example")
    objs = kustomize(K8S / "example-podmonitor")
    assert not kinds(objs, "ServiceMonitor")
    assert "vllm-kvoffload" not in {s["metadata"]["name"] for s in kinds(objs, "Service")}
    assert {s["metadata"]["name"] for s in kinds(objs, "Service")} == {"vllm"}  # vLLM's own API Service stays
    (pm,) = kinds(objs, "PodMonitor")
    labels, pod = pod_of(objs)
    assert pm["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (ep,) = pm["spec"]["podMetricsEndpoints"]
    side = sidecar(pod)
    assert container_port(pod, ep["port"]) == (SIDECAR, listen_port(side)) and ep["path"] == "/metrics"
    # Same job label as the ServiceMonitor variant (the metrics Service's name), same release label.
    (svc_sm,) = kinds(service_variant, "ServiceMonitor")
    (svc,) = [s for s in kinds(service_variant, "Service") if s["metadata"]["name"] != "vllm"]
    jobs = [r for r in ep["relabelings"] if r["targetLabel"] == "job"]
    assert [r["replacement"] for r in jobs] == [svc["metadata"]["name"]]
    assert pm["metadata"]["labels"]["release"] == svc_sm["metadata"]["labels"]["release"]
    (rule,) = kinds(objs, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == pm["metadata"]["labels"]["release"]
    # Everything else is the ServiceMonitor variant unchanged.
    keep = {(o["kind"], o["metadata"]["name"]) for o in objs} - {("PodMonitor", "vllm-kvoffload")}
    assert keep == {(o["kind"], o["metadata"]["name"]) for o in service_variant} - {
        ("ServiceMonitor", "vllm-kvoffload"),
        ("Service", "vllm-kvoffload"),
    }


def _covers(rule: dict[str, Any], pod: dict[str, Any], number: int) -> bool:
    """Does an ingress rule admit traffic to this container port? (no `ports` = every port)"""
    ports = rule.get("ports")
    if not ports:
        return True
    return any(container_port(pod, p["port"])[1] == number for p in ports)


@needs_kubectl
def test_networkpolicy_lets_only_prometheus_reach_the_exporter_port(tmp_path):
    objs = with_components(tmp_path, "example", "networkpolicy")
    (np,) = kinds(objs, "NetworkPolicy")
    labels, pod = pod_of(objs)
    spec = np["spec"]
    assert spec["podSelector"]["matchLabels"].items() <= labels.items()
    assert spec["policyTypes"] == ["Ingress"]
    exporter = listen_port(sidecar(pod))
    admitting = [r for r in spec["ingress"] if _covers(r, pod, exporter)]
    assert admitting, "Prometheus could not scrape the exporter"
    for rule in admitting:
        assert rule.get("from"), "a rule without `from` opens the exporter port to every source"
        for peer in rule["from"]:
            assert "ipBlock" not in peer
            assert peer["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
            assert peer["namespaceSelector"]["matchLabels"]
    # vLLM's API stays reachable (a policy that selects the pod denies everything it does not list).
    vllm_port = container_port(pod, "http")[1]
    assert any(_covers(r, pod, vllm_port) and not r.get("from") for r in spec["ingress"])
    # The component adds nothing else.
    assert {(o["kind"], o["metadata"]["name"]) for o in objs} - {
        (o["kind"], o["metadata"]["name"]) for o in kustomize(K8S / "example")
    } == {("NetworkPolicy", np["metadata"]["name"])}


def test_deploy_guide_explains_replica_identity_and_the_variants():
    text = " ".join((ROOT / "docs/deploy.md").read_text().split())
    for needle in (
        "shareProcessNamespace: true",
        "no readinessProbe",
        "deploy/kubernetes/example-podmonitor",
        "deploy/kubernetes/networkpolicy",
        "podMonitorSelectorNilUsesHelmValues",
        "`instance`",
        "`pod`",
        "`namespace`",
    ):
        assert needle in text, needle
