"""Deploy artefacts: Dockerfile, lock files, compose stack, Kubernetes sidecar component.

No Docker engine or cluster is needed: the image cannot be built here, so the Dockerfile is parsed and
checked against the CLI and the app; the compose file and the kustomize component are checked
structurally (plus `docker compose config`, `promtool` and `amtool` where those binaries exist, skipped
otherwise; `kubectl kustomize` is required). Generated files are compared with a fresh render.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from kvoffload_exporter import __version__
from kvoffload_exporter.bundle.deployment import deploy
from kvoffload_exporter.bundle.settings import DEFAULT
from kvoffload_exporter.cli import build_parser
from kvoffload_exporter.commands.serve import config_from_args
from kvoffload_exporter.config.settings import Config, TargetConfig
from kvoffload_exporter.server.app import make_app

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_DIR = ROOT / "deploy/compose"
COMPOSE = COMPOSE_DIR / "compose.yaml"
K8S = ROOT / "deploy/kubernetes"
LOCK = ROOT / "deploy/requirements.lock"
BUILD_LOCK = ROOT / "deploy/build-requirements.lock"
SIDECAR = "kvoffload-exporter"
KV_TRANSFER_CONFIG = {
    "kv_connector": "OffloadingConnector",
    "kv_role": "kv_both",
    "kv_connector_extra_config": {"block_size": 64, "cpu_bytes_to_use": 8000000000},
}
PROMTOOL = shutil.which("promtool")
AMTOOL = shutil.which("amtool")
KUBECTL = shutil.which("kubectl")


def sources_from_dir(root: Path) -> dict[str, str]:
    """The committed sources `render_deploy` reads (rule files and dashboards), as {path: text}."""
    out = {}
    for pattern in ("alerts/*.rules.yaml", "dashboards/*.json"):
        for p in sorted(root.glob(pattern)):
            out[p.relative_to(root).as_posix()] = p.read_text(encoding="utf-8")
    return out


def app_routes() -> set[str]:
    app = make_app(Config(targets=(TargetConfig(url="http://127.0.0.1:8000"),)))
    return {r.resource.canonical for r in app.router.routes() if r.resource is not None}


# --------------------------------------------------------------------------------------------------
# Generated files
# --------------------------------------------------------------------------------------------------


def test_bundle_renders_the_deploy_files():
    pytest.importorskip("grafanalib")
    from kvoffload_exporter.bundle import render_bundle

    bundle = render_bundle()
    for path, text in deploy.render_deploy(sources_from_dir(ROOT)).items():
        assert bundle.get(path) == text, path
    # Selectors reach the generated Kubernetes objects too.
    selected = render_bundle(["job=vllm-kvoffload"])
    assert 'job="vllm-kvoffload"' in selected[deploy.PROMETHEUS_RULE_PATH]
    assert 'job=\\"vllm-kvoffload\\"' in selected[deploy.DASHBOARDS_CONFIGMAPS_PATH]


def test_a_rendered_bundle_builds_with_kubectl_kustomize(tmp_path):
    """`bundle --out DIR` writes the whole sidecar Component, not only generated/, so
    `kubectl kustomize DIR/deploy/kubernetes/sidecar` builds; its objects are the committed component's
    (the selector reaches the PrometheusRule)."""
    pytest.importorskip("grafanalib")
    from kvoffload_exporter.cli import main

    if KUBECTL is None:
        pytest.fail("kubectl not installed: the Kubernetes checks need `kubectl kustomize` (see .ci/run)")
    out = tmp_path / "rendered"
    assert main(["bundle", "--out", str(out), "--selector", "job=my-vllm"]) == 0
    for f in (K8S / "sidecar").rglob("*.yaml"):  # every file of the committed component is written
        assert (out / f.relative_to(ROOT)).is_file(), f.relative_to(ROOT)

    def build(root: Path) -> list[dict[str, Any]]:
        r = subprocess.run(
            [KUBECTL, "kustomize", str(root / "deploy/kubernetes/sidecar")], check=False, capture_output=True, text=True
        )
        assert r.returncode == 0, r.stderr
        return [d for d in yaml.safe_load_all(r.stdout) if d]

    rendered, committed = build(out), build(ROOT)
    assert sorted(o["kind"] for o in rendered) == sorted(o["kind"] for o in committed)
    assert {"Service", "ServiceMonitor", "PrometheusRule", "ConfigMap"} <= {o["kind"] for o in rendered}
    (rule,) = by_kind(rendered, "PrometheusRule")
    assert 'job="my-vllm"' in yaml.safe_dump(rule, width=1 << 20)


def test_prometheus_rule_and_configmaps_carry_the_sources_unchanged():
    src = sources_from_dir(ROOT)
    rules = [p for p in src if deploy.RULE_FILE.match(p)]
    dashboards = [p for p in src if deploy.DASHBOARD_FILE.match(p)]
    assert rules and dashboards
    (rule,) = yaml.safe_load_all((ROOT / deploy.PROMETHEUS_RULE_PATH).read_text())
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["kind"] == "PrometheusRule"
    assert rule["metadata"]["labels"]["release"]
    assert rule["spec"]["groups"] == [g for p in rules for g in yaml.safe_load(src[p])["groups"]]
    cms = list(yaml.safe_load_all((ROOT / deploy.DASHBOARDS_CONFIGMAPS_PATH).read_text()))
    assert len(cms) == len(dashboards)
    for cm, path in zip(cms, dashboards):
        assert cm["kind"] == "ConfigMap" and cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["annotations"]["grafana_folder"] == DEFAULT.grafana_folder
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", cm["metadata"]["name"])
        assert cm["data"] == {Path(path).name: src[path]}  # byte-identical JSON


def test_generator_on_a_minimal_stand_in(tmp_path):
    (tmp_path / "alerts/tests").mkdir(parents=True)
    (tmp_path / "dashboards").mkdir()
    (tmp_path / "alerts/a.rules.yaml").write_text(
        "groups:\n- name: a\n  rules:\n  - alert: A\n    expr: |-\n      up\n      == 0\n    for: 5m\n"
    )
    (tmp_path / "alerts/tests/a.test.yaml").write_text("rule_files: [../a.rules.yaml]\n")
    (tmp_path / "alerts/not-rules.yaml").write_text("apiVersion: 1\n")
    (tmp_path / "dashboards/My Board.json").write_text(json.dumps({"uid": "x", "title": "Ünïcode →"}, indent=2) + "\n")
    src = sources_from_dir(tmp_path)
    assert set(src) == {"alerts/a.rules.yaml", "dashboards/My Board.json"}
    out = deploy.render_deploy(src)
    (rule,) = yaml.safe_load_all(out[deploy.PROMETHEUS_RULE_PATH])
    assert rule["spec"]["groups"][0]["rules"][0]["expr"] == "up\n== 0"
    (cm,) = yaml.safe_load_all(out[deploy.DASHBOARDS_CONFIGMAPS_PATH])
    assert cm["metadata"]["name"] == "grafana-dashboard-my-board"
    assert cm["data"]["My Board.json"] == src["dashboards/My Board.json"]
    with pytest.raises(ValueError, match="used twice"):
        deploy.render_deploy({**src, "alerts/b.rules.yaml": src["alerts/a.rules.yaml"]})
    with pytest.raises(ValueError, match="no alerts"):
        deploy.render_deploy({"dashboards/x.json": "{}"})
    with pytest.raises(ValueError, match="ConfigMap"):
        deploy.render_deploy({**src, "dashboards/big.json": json.dumps({"x": "y" * (1 << 20)})})


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")
def test_prometheus_rule_spec_passes_promtool(tmp_path):
    (rule,) = yaml.safe_load_all((ROOT / deploy.PROMETHEUS_RULE_PATH).read_text())
    f = tmp_path / "spec.rules.yaml"
    f.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    r = subprocess.run([PROMTOOL, "check", "rules", str(f)], check=False, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


# --------------------------------------------------------------------------------------------------
# Lock files
# --------------------------------------------------------------------------------------------------


def parse_lock(path: Path) -> dict[str, tuple[str, list[str]]]:
    text = re.sub(r"\\\n", " ", path.read_text())
    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9._-]+)==([^\s;]+)((?:\s+--hash=sha256:[0-9a-f]{64})+)", line)
        assert m, f"{path.name}: not an exact, hashed pin: {line!r}"
        pins[canonicalize_name(m.group(1))] = (m.group(2), re.findall(r"[0-9a-f]{64}", m.group(3)))
    return pins


def pyproject() -> dict[str, Any]:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_lock_pins_exactly_the_runtime_dependency_closure():
    pins = parse_lock(LOCK)
    for raw in pyproject()["project"]["dependencies"]:
        req = Requirement(raw)
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is a runtime dependency but not in {LOCK.name}"
        assert req.specifier.contains(pins[name][0], prereleases=True), (raw, pins[name][0])
    extras = {
        canonicalize_name(Requirement(r).name)
        for group in ("bundle", "test", "dev")
        for r in pyproject()["project"]["optional-dependencies"][group]
        if not r.startswith("kvoffload")
    }
    assert not extras & set(pins), f"build/test-only packages in the image lock: {extras & set(pins)}"
    assert "grafanalib" not in pins
    # Closed under Requires-Dist (for the image's CPython 3.12 on Linux), checked with the metadata of
    # the versions installed here where they are the pinned ones (a newer release installed in this
    # venv says nothing about the pinned one).
    from importlib import metadata

    env = {
        "python_version": "3.12",
        "python_full_version": "3.12.0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "os_name": "posix",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "platform_machine": "x86_64",
        "extra": "",
    }
    checked = 0
    for name, (version, _) in pins.items():
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if dist.version != version:
            continue
        checked += 1
        for raw in dist.requires or []:
            req = Requirement(raw)
            if req.marker is None or req.marker.evaluate(env):
                assert canonicalize_name(req.name) in pins, f"{name} needs {req.name}, missing from the lock"
    if not checked:
        pytest.skip("none of the locked versions is installed here: closure not checked")


def test_build_lock_pins_the_build_backend():
    pins = parse_lock(BUILD_LOCK)
    for raw in pyproject()["build-system"]["requires"]:
        req = Requirement(raw)
        assert req.specifier.contains(pins[canonicalize_name(req.name)][0])


# --------------------------------------------------------------------------------------------------
# Dockerfile
# --------------------------------------------------------------------------------------------------


def dockerfile() -> list[list[tuple[str, str]]]:
    """Stages, each a list of (INSTRUCTION, arguments) with continuations joined and comments dropped."""
    text = (ROOT / "Dockerfile").read_text()
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    stages: list[list[tuple[str, str]]] = [[]]
    for line in joined.splitlines():
        if not line.strip():
            continue
        instr, _, rest = line.strip().partition(" ")
        instr = instr.upper()
        if instr == "FROM":
            stages.append([])
        stages[-1].append((instr, rest.strip()))
    return stages


def instr(stage: list[tuple[str, str]], name: str) -> list[str]:
    return [a for i, a in stage if i == name]


def env_of(stage: list[tuple[str, str]]) -> dict[str, str]:
    out = {}
    for a in instr(stage, "ENV"):
        for k, v in re.findall(r"(\w+)=(\S+)", a):
            out[k] = v
    return out


def test_dockerfile_shape():
    stages = dockerfile()
    preamble, build, final = stages
    args = dict(a.split("=", 1) for a in instr(preamble, "ARG"))
    assert args["PYTHON_IMAGE"] == "python:3.12-slim"
    assert instr(build, "FROM") == ["${PYTHON_IMAGE} AS build"] and instr(final, "FROM") == ["${PYTHON_IMAGE}"]
    runs = " ".join(instr(build, "RUN"))
    assert "--require-hashes" in runs and "--only-binary=:all:" in runs and "-r deploy/requirements.lock" in runs
    assert "--no-deps" in runs and "pip check" in runs
    assert "grafanalib" not in runs + " ".join(a for stage in stages for _, a in stage)
    # Runtime stage: only the venv is copied from the build stage, non-root numeric user, OCI labels.
    assert [c for c in instr(final, "COPY")] == ["--from=build /opt/kvoffload /opt/kvoffload"]
    (user,) = instr(final, "USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) > 0 and gid.isdigit() and int(gid) > 0
    labels = dict(re.findall(r'(org\.opencontainers\.image\.[a-z]+)="([^"]*)"', " ".join(instr(final, "LABEL"))))
    for key in ("title", "description", "source", "licenses", "version", "revision", "created"):
        assert f"org.opencontainers.image.{key}" in labels
    assert labels["org.opencontainers.image.licenses"] == pyproject()["project"]["license"]
    final_args = dict(a.split("=", 1) for a in instr(final, "ARG") if "=" in a)
    assert final_args["VERSION"] == __version__, (
        "bump ARG VERSION in the Dockerfile with kvoffload_exporter.__version__"
    )


def test_dockerfile_entrypoint_cmd_port_and_healthcheck_match_the_cli():
    final = dockerfile()[-1]
    (entry,) = instr(final, "ENTRYPOINT")
    assert json.loads(entry) == ["kvoffload-exporter"] == list(pyproject()["project"]["scripts"])
    (cmd,) = instr(final, "CMD")
    argv = json.loads(cmd)
    args = build_parser().parse_args(argv)
    assert args.command == "serve"
    cfg = config_from_args(args)
    host, port = cfg.listen_host_port
    assert host == "0.0.0.0" and [t.url for t in cfg.targets] == ["http://127.0.0.1:8000"]
    (expose,) = instr(final, "EXPOSE")
    assert expose.split() == [str(port)]
    (hc,) = instr(final, "HEALTHCHECK")
    opts, _, hc_cmd = hc.partition(" CMD ")
    assert re.search(r"--interval=\d+s", opts) and re.search(r"--timeout=\d+s", opts)
    hc_argv = json.loads(hc_cmd)
    assert hc_argv[0] == "python" and "urllib.request" in hc_argv[-1] and "curl" not in hc
    url = env_of(final)["KVOFFLOAD_HEALTHCHECK_URL"]
    m = re.fullmatch(r"http://127\.0\.0\.1:(\d+)(/\S*)", url)
    assert m and int(m.group(1)) == port
    assert m.group(2) == "/healthz" and m.group(2) in app_routes()


def dockerignore_excludes(rel: str) -> bool:
    """Docker's rules: patterns in order, the last match wins, `!` re-includes; a match on a parent
    directory excludes everything below it."""
    patterns = [
        ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines() if ln.strip() and not ln.startswith("#")
    ]

    def regex(p: str) -> re.Pattern[str]:
        out = ""
        for i, seg in enumerate(p.strip("/").split("/")):
            if seg == "**":
                out += "(?:[^/]+/)*"
                continue
            s = re.escape(seg).replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
            out += s + ("/" if i < len(p.strip("/").split("/")) - 1 else "")
        return re.compile(out.replace("/(?:", "(?:", 0))

    parts = rel.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    excluded = False
    for p in patterns:
        neg = p.startswith("!")
        rx = regex(p[1:] if neg else p)
        if any(rx.fullmatch(x) for x in prefixes):
            excluded = not neg
    return excluded


def test_build_context_holds_exactly_what_the_dockerfile_copies():
    build = dockerfile()[1]
    sources = []
    for c in instr(build, "COPY"):
        words = [w for w in c.split() if not w.startswith("--")]
        sources += words[:-1]
    assert sources, "no COPY in the build stage"
    for s in sources:
        assert (ROOT / s).exists(), s
        probe = s if (ROOT / s).is_file() else f"{s}/cli.py"
        assert not dockerignore_excludes(probe), f"{probe} is copied but excluded by .dockerignore"
    assert pyproject()["project"]["readme"] in sources  # setuptools reads it while building
    for kept_out in (
        ".git/HEAD",
        ".venv/bin/python",
        "tests/test_app.py",
        "bench/pipeline.py",
        "kvoffload_exporter/__pycache__/cli.cpython-312.pyc",
        "deploy/compose/compose.yaml",
    ):
        assert dockerignore_excludes(kept_out), kept_out


def test_runtime_dependencies_suffice_for_the_entrypoint(tmp_path):
    """The image holds only the locked distributions: on a sys.path of the stdlib, those distributions
    (linked from this venv) and the source tree, the CLI builds, the image's default command validates,
    and the app and its I/O sources import."""
    from importlib import metadata

    site = tmp_path / "site"
    site.mkdir()
    for name in parse_lock(LOCK):
        dist = metadata.distribution(name)
        for top in {f.parts[0] for f in dist.files or [] if f.parts and not f.parts[0].startswith("..")}:
            src = Path(dist.locate_file(top))
            if src.exists() and not (site / top).exists() and top != "__pycache__":
                (site / top).symlink_to(src)
    stdlib = subprocess.run(
        [sys.executable, "-S", "-c", "import json, sys; print(json.dumps(sys.path[1:]))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    paths = [*json.loads(stdlib), str(site), str(ROOT)]
    code = f"""
import json, sys
sys.path[:] = {paths!r}
from kvoffload_exporter.cli import main
assert main(json.loads(sys.argv[1]) + ["--config.check"]) == 0
import kvoffload_exporter.server.app, kvoffload_exporter.server.exporter, kvoffload_exporter.sources.vllm_http, kvoffload_exporter.sources.host, kvoffload_exporter.sources.gpu
import kvoffload_exporter.canary.plugin, kvoffload_exporter.commands.simulate, kvoffload_exporter.sim.server
for m in ("grafanalib", "jsonschema", "pytest"):
    assert m not in sys.modules, m
"""
    (cmd,) = instr(dockerfile()[-1], "CMD")
    r = subprocess.run(
        [sys.executable, "-S", "-c", code, cmd],
        check=False,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "configuration OK" in r.stdout
    r = subprocess.run(
        [sys.executable, "-S", "-c", f"import sys; sys.path[:] = {paths!r}; import grafanalib"],
        check=False,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert r.returncode != 0, "the isolation lets a non-locked package through"


# --------------------------------------------------------------------------------------------------
# Compose
# --------------------------------------------------------------------------------------------------

_VAR = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def interpolate(value: Any) -> Any:
    """Compose's `${VAR:-default}` with the defaults (the environment of a fresh checkout)."""
    if isinstance(value, str):
        return _VAR.sub(lambda m: m.group(2) or "", value)
    if isinstance(value, list):
        return [interpolate(v) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v) for k, v in value.items()}
    return value


def compose() -> dict[str, Any]:
    return interpolate(yaml.safe_load(COMPOSE.read_text()))


def profile_services(doc: dict[str, Any], profile: str) -> dict[str, Any]:
    return {n: s for n, s in doc["services"].items() if not s.get("profiles") or profile in s["profiles"]}


def bind_mounts(service: dict[str, Any]) -> dict[str, Path]:
    """Container path → host path of the relative bind mounts."""
    out = {}
    for v in service.get("volumes", []):
        src, dst = v.split(":")[:2]
        if src.startswith("."):
            out[dst] = (COMPOSE_DIR / src).resolve()
    return out


def exporter_config(service: dict[str, Any]) -> tuple[Any, Config]:
    """Parse a compose exporter service's command with the real CLI and load its mounted config."""
    args = build_parser().parse_args(service["command"])
    mounts = bind_mounts(service)
    args.config = str(mounts[args.config])
    return args, config_from_args(args)


def test_compose_profiles_and_services():
    doc = compose()
    sim, gpu = profile_services(doc, "sim"), profile_services(doc, "gpu")
    monitoring = {"prometheus", "alertmanager", "grafana"}
    assert {"vllm-pod", "sim", "exporter-sim"} | monitoring == set(sim)
    assert {"vllm-pod", "vllm", "exporter-gpu"} | monitoring == set(gpu)
    for profile, services in (("sim", sim), ("gpu", gpu)):
        for name, s in services.items():
            deps = s.get("depends_on", [])
            for d in deps if isinstance(deps, list) else list(deps):
                assert d in services, f"{profile}: {name} depends on {d}, not in the profile"
            nm = s.get("network_mode", "")
            if nm.startswith("service:"):
                assert nm.split(":", 1)[1] in services and "ports" not in s
            assert "image" in s
    declared = set(doc.get("volumes") or {})
    for name, s in doc["services"].items():
        for v in s.get("volumes", []):
            src = v.split(":")[0]
            if src.startswith("."):
                assert (COMPOSE_DIR / src).exists(), f"{name}: {src} does not exist"
            elif not src.startswith(("/", "~")):
                assert src in declared, f"{name}: named volume {src} is not declared"


def test_compose_ports_are_loopback_only():
    published = []
    for name, s in compose()["services"].items():
        for p in s.get("ports", []):
            assert isinstance(p, str) and p.startswith("127.0.0.1:"), f"{name}: {p!r} is not bound to 127.0.0.1"
            published.append(p)
    assert published


def test_compose_exporter_sidecar_matches_vllm_and_prometheus():
    doc = compose()
    pod = doc["services"]["vllm-pod"]
    pod_ports = {int(p.split(":")[2]): int(p.split(":")[1]) for p in pod["ports"]}
    prom = yaml.safe_load((COMPOSE_DIR / "prometheus/prometheus.yml").read_text())
    (job,) = [j for j in prom["scrape_configs"] if j["job_name"] == "kvoffload"]
    (scrape_target,) = job["static_configs"][0]["targets"]
    for name in ("exporter-sim", "exporter-gpu"):
        s = doc["services"][name]
        assert s["network_mode"] == "service:vllm-pod" and s["read_only"] is True and s["cap_drop"] == ["ALL"]
        args, cfg = exporter_config(s)
        assert args.command == "serve"
        host, port = cfg.listen_host_port
        assert host == "0.0.0.0" and port in pod_ports and scrape_target == f"vllm-pod:{port}"
        assert [t.url for t in cfg.targets] == ["http://127.0.0.1:8000"]
        assert cfg.host_enabled and cfg.cgroup == "auto"
        assert cfg.gpu_enabled is (name == "exporter-gpu")
    # The simulator and vLLM listen where the exporter polls.
    sim_args = build_parser().parse_args(doc["services"]["sim"]["command"])
    assert sim_args.command == "simulate" and sim_args.listen == "127.0.0.1:8000" and sim_args.traffic > 0
    assert sim_args.cpu_bytes == 8_000_000_000
    vllm = doc["services"]["vllm"]
    assert vllm["image"].startswith("vllm/vllm-openai:")
    argv = vllm["command"]
    assert argv[argv.index("--port") + 1] == "8000" and 8000 in pod_ports
    assert json.loads(argv[argv.index("--kv-transfer-config") + 1]) == KV_TRANSFER_CONFIG
    # The exporter's tier size is the connector's.
    assert exporter_config(doc["services"]["exporter-gpu"])[1].targets[0].tier_bytes == 8e9


def test_compose_grafana_provisioning_points_at_the_repository_files():
    grafana = compose()["services"]["grafana"]
    mounts = bind_mounts(grafana)
    ds_dir = mounts["/etc/grafana/provisioning/datasources"]
    datasources = yaml.safe_load((ds_dir / "kvoffload.yaml").read_text())["datasources"]
    prom_uid = next(d["uid"] for d in datasources if d["type"] == "prometheus")
    providers = yaml.safe_load((mounts["/etc/grafana/provisioning/dashboards"] / "kvoffload.yaml").read_text())
    (provider,) = providers["providers"]
    dash_dir = mounts[provider["options"]["path"]]
    assert dash_dir == ROOT / "dashboards" and sorted(dash_dir.glob("*.json"))
    alerting = [h for c, h in mounts.items() if c.startswith("/etc/grafana/provisioning/alerting/")]
    assert alerting
    for f in alerting:
        for group in yaml.safe_load(f.read_text())["groups"]:
            assert group["folder"] == provider["folder"]
            for rule in group["rules"]:
                uids = {d["datasourceUid"] for d in rule["data"]} - {"__expr__"}
                assert uids == {prom_uid}, rule["title"]
    for d in datasources:
        host = re.match(r"http://([\w-]+):", d["url"]).group(1)
        assert host in compose()["services"]


def prometheus_tree(tmp_path: Path) -> Path:
    """The Prometheus container's /etc/prometheus as the compose mounts lay it out."""
    for container, host in bind_mounts(compose()["services"]["prometheus"]).items():
        dst = tmp_path / container.lstrip("/")
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if host.is_dir() else shutil.copy)(host, dst)
    return tmp_path / "etc/prometheus/prometheus.yml"


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")
def test_compose_prometheus_config_passes_promtool(tmp_path):
    cfg = prometheus_tree(tmp_path)
    r = subprocess.run([PROMTOOL, "check", "config", str(cfg)], check=False, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"(\d+) rule files found", r.stdout + r.stderr)
    assert m and int(m.group(1)) >= 1, "the rule_files glob matches no mounted rule file"


@pytest.mark.skipif(AMTOOL is None, reason="amtool not installed (apt-get install prometheus-alertmanager)")
def test_compose_alertmanager_config_passes_amtool():
    mounts = bind_mounts(compose()["services"]["alertmanager"])
    r = subprocess.run(
        [AMTOOL, "check-config", str(mounts["/etc/alertmanager/alertmanager.yml"])],
        check=False,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def compose_cli() -> list[str] | None:
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], check=False, capture_output=True).returncode == 0:
        return [docker, "compose"]
    v1 = shutil.which("docker-compose")
    return [v1] if v1 else None


@pytest.mark.skipif(compose_cli() is None, reason="no compose CLI (docker compose plugin or docker-compose)")
@pytest.mark.parametrize("profile", ["sim", "gpu"])
def test_compose_config_resolves(profile):
    r = subprocess.run(
        [*compose_cli(), "-f", str(COMPOSE), "--profile", profile, "config", "-q"],
        check=False,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "HF_", "KVOFFLOAD_"))},
    )
    assert r.returncode == 0, r.stdout + r.stderr


# --------------------------------------------------------------------------------------------------
# Kubernetes (kustomize)
# --------------------------------------------------------------------------------------------------


@functools.cache
def kustomized() -> list[dict[str, Any]]:
    """The example overlay as `kubectl kustomize` renders it (kustomize v4+: components, patches with targets).

    Required, not skipped: the objects a cluster would get are only what real kustomize makes of the files.
    `.ci/run` installs kubectl."""
    if KUBECTL is None:
        pytest.fail("kubectl not installed: the Kubernetes checks need `kubectl kustomize` (see .ci/run)")
    r = subprocess.run([KUBECTL, "kustomize", str(K8S / "example")], check=False, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def port_number(container: dict[str, Any], port: Any) -> int:
    if isinstance(port, int):
        return port
    (p,) = [p["containerPort"] for p in container.get("ports", []) if p.get("name") == port]
    return int(p)


def test_kubernetes_objects_are_consistent(tmp_path):
    objs = kustomized()
    for o in objs:
        assert o.get("apiVersion") and o.get("kind") and o.get("metadata", {}).get("name"), o
    kinds = sorted(o["kind"] for o in objs)
    assert {"Deployment", "Service", "ServiceMonitor", "PrometheusRule", "ConfigMap"} <= set(kinds)

    (dep,) = by_kind(objs, "Deployment")
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    pod = dep["spec"]["template"]["spec"]
    names = [c["name"] for c in pod["containers"]]
    assert names[0] == "vllm" and SIDECAR in names, "the sidecar is appended after vLLM"
    vllm = pod["containers"][0]
    side = next(c for c in pod["containers"] if c["name"] == SIDECAR)

    # The exporter's effective configuration: its args through the real CLI, the ConfigMap as file.
    mounts = {m["name"]: m for m in side["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert set(mounts) <= set(volumes)
    config_maps = {c["metadata"]["name"]: c for c in by_kind(objs, "ConfigMap")}
    (cfg_mount,) = [m for m in mounts.values() if "configMap" in volumes[m["name"]]]
    cm = config_maps[volumes[cfg_mount["name"]]["configMap"]["name"]]
    args = build_parser().parse_args(side["args"])
    assert args.command == "serve"
    rel = os.path.relpath(args.config, cfg_mount["mountPath"])
    (tmp_path / rel).write_text(cm["data"][rel])
    args.config = str(tmp_path / rel)
    cfg = config_from_args(args)
    from kvoffload_exporter.canary.plugin import settings_from_args

    assert settings_from_args(args, cfg) is None, "the canary is opt-in"
    canary = cfg.canary  # typed CanarySettings, validated with the file
    host, listen_port = cfg.listen_host_port
    (cport,) = side["ports"]
    assert host == "0.0.0.0" and cport["containerPort"] == listen_port
    for probe in ("livenessProbe",):  # no readinessProbe: tests/test_deploy_ops.py
        get = side[probe]["httpGet"]
        assert port_number(side, get["port"]) == listen_port
        assert get["path"] == "/healthz" and get["path"] in app_routes()
    (target,) = cfg.targets
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", target.url)
    vllm_port = int(target.url.rsplit(":", 1)[1])
    assert vllm_port in [p["containerPort"] for p in vllm["ports"]]
    assert vllm["args"][vllm["args"].index("--port") + 1] == str(vllm_port)
    assert json.loads(vllm["args"][vllm["args"].index("--kv-transfer-config") + 1]) == KV_TRANSFER_CONFIG
    assert target.tier_bytes == KV_TRANSFER_CONFIG["kv_connector_extra_config"]["cpu_bytes_to_use"]
    assert cfg.cgroup == "auto" and not cfg.gpu_enabled

    # Hardening and resources.
    sc = side["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
    uid = instr(dockerfile()[-1], "USER")[0].split(":")[0]
    assert str(sc["runAsUser"]) == uid
    assert {"cpu", "memory"} <= set(side["resources"]["requests"]) and "memory" in side["resources"]["limits"]
    state = env_of(dockerfile()[-1])["XDG_STATE_HOME"]
    assert any(m["mountPath"] == state and "emptyDir" in volumes[m["name"]] for m in mounts.values()), (
        "the canary's state directory must be writable under readOnlyRootFilesystem"
    )
    env = {e["name"]: e for e in side.get("env", [])}
    key = env[canary.api_key_env]["valueFrom"]["secretKeyRef"]
    assert key["optional"] is True and key["name"] and key["key"]
    assert "api_key" not in cm["data"][rel].replace("api_key_env", "")

    # Service → pods, ServiceMonitor → Service and port.
    services = {s["metadata"]["name"]: s for s in by_kind(objs, "Service")}
    (sm,) = by_kind(objs, "ServiceMonitor")
    matched = [
        s
        for s in services.values()
        if sm["spec"]["selector"]["matchLabels"].items() <= s["metadata"].get("labels", {}).items()
    ]
    assert len(matched) == 1, "the ServiceMonitor must select exactly the metrics Service"
    (svc,) = matched
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    (ep,) = sm["spec"]["endpoints"]
    (sport,) = [p for p in svc["spec"]["ports"] if p["name"] == ep["port"]]
    assert port_number(side, sport["targetPort"]) == listen_port and ep["path"] == "/metrics"

    # kube-prometheus-stack selection and the Grafana sidecar.
    (rule,) = by_kind(objs, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == sm["metadata"]["labels"]["release"]
    dashboards = [c for c in config_maps.values() if (c["metadata"].get("labels") or {}).get("grafana_dashboard")]
    assert len(dashboards) == len(list((ROOT / "dashboards").glob("*.json")))
    assert all(c["metadata"]["labels"]["grafana_dashboard"] == "1" for c in dashboards)


def test_kubernetes_guide_names_the_release_label():
    text = (ROOT / "docs/deploy.md").read_text()
    for needle in (
        "release",
        "grafana_dashboard",
        "kubectl kustomize deploy/kubernetes/example",
        "serviceMonitorSelectorNilUsesHelmValues",
        "ruleSelectorNilUsesHelmValues",
    ):
        assert needle in text, needle
