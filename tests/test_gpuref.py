"""The GPU reference harness (tools/gpuref/): it still describes the recorded runs, speaks the product's `check`,
runs end to end against the product's simulator, and turns recorded runs into the reference table.

The rehearsal is the real sequence (`run.sh --rehearse`): two simulators in place of the vLLM servers, the
product's `serve` and `check --concurrency`, the cluster analysis from `check`'s own `requests.jsonl`.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
from support.prom import samples

from kvoffload_exporter.cli import build_parser
from kvoffload_exporter.config.flags import renamed
from kvoffload_exporter.configdoc import serve_parser

ROOT = Path(__file__).resolve().parents[1]
GPUREF = ROOT / "tools" / "gpuref"
REF = ROOT / "docs" / "gpu-reference"
TABLE = REF / "vllm-0.26-h200-concurrency.md"
SWEEPS = ROOT / "tests" / "fixtures" / "vllm-0.26.0-h200-sweep"
HARNESS = ("spec", "clusters", "run", "record")


@pytest.fixture(scope="module")
def gpuref() -> Iterator[dict[str, ModuleType]]:
    """The harness's modules as `python tools/gpuref/run.py` sees them (its folder first on sys.path)."""
    sys.path.insert(0, str(GPUREF))
    try:
        yield {name: importlib.import_module(name) for name in HARNESS}
    finally:
        sys.path.remove(str(GPUREF))
        for name in HARNESS:
            sys.modules.pop(name, None)


def test_harness_import_has_no_side_effects(tmp_path: Path) -> None:
    code = "import os, runpy, sys; sys.path.insert(0, os.path.dirname(sys.argv[1])); runpy.run_path(sys.argv[1])"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in HARNESS:
        path = str(GPUREF / f"{name}.py")
        r = subprocess.run([sys.executable, "-c", code, path], cwd=tmp_path, capture_output=True, text=True, env=env)
        assert r.returncode == 0 and not r.stdout and not r.stderr, (name, r.stdout, r.stderr)
        assert not list(tmp_path.iterdir()), name


@pytest.mark.parametrize("shape", ["0.6b", "32b"])
def test_spec_reproduces_the_recorded_vllm_command_lines(gpuref: dict[str, ModuleType], shape: str) -> None:
    spec = gpuref["spec"]
    recorded = json.loads((REF / shape / "summary.json").read_text(encoding="utf-8"))["servers"]
    prefix = "32" if shape == "32b" else ""  # the device run tagged the 32B servers 32A, 32B
    for server in spec.SERVERS:
        argv = spec.vllm_argv("python3", spec.SHAPES[shape], server, max_num_seqs=16)  # that run's queue
        want = shlex.split(recorded[prefix + server.role]["cmd"])
        # The model folder was the harness's copy of the day; only that path differs.
        assert Path(want[4]).name == Path(argv[4]).name == spec.SHAPES[shape].config_dir
        assert argv[:4] + argv[5:] == want[:4] + want[5:], server.role


@pytest.mark.parametrize("shape", ["0.6b", "14b"])
def test_spec_reproduces_the_recorded_concurrency_servers(gpuref: dict[str, ModuleType], shape: str) -> None:
    """The servers of the recorded load sweep (docs/gpu-reference/vllm-0.26-h200-concurrency/summary_*.json)."""
    spec = gpuref["spec"]
    recorded = json.loads((REF / "vllm-0.26-h200-concurrency" / f"summary_{shape}.json").read_text(encoding="utf-8"))
    for server in spec.SERVERS:
        want = shlex.split(recorded["servers"][f"{shape}_{server.role}"]["cmd"])
        argv = spec.vllm_argv("python3", spec.SHAPES[shape], server)
        assert Path(want[4]).name == Path(argv[4]).name == spec.SHAPES[shape].config_dir
        assert argv[:4] + argv[5:] == want[:4] + want[5:], server.role


def test_serve_invocation_is_the_recorded_one(gpuref: dict[str, ModuleType]) -> None:
    spec = gpuref["spec"]
    recorded = json.loads((REF / "0.6b" / "summary.json").read_text(encoding="utf-8"))
    want = shlex.split(recorded["exporter"]["serve_main"])
    now = dict(renamed(serve_parser()))  # the record predates serve's renamed flags: the same run today
    assert spec.serve_argv("python3", spec.SERVERS, spec.EXPORTER_PORT) == [now.get(w, w) for w in want]


def test_check_invocation_parses_as_the_products_check(gpuref: dict[str, ModuleType]) -> None:
    spec = gpuref["spec"]
    argv = spec.check_argv("python3", spec.SERVERS, spec.Sweep(), json_path="J", evidence="E", secret="S", seed=0)
    assert argv[:3] == ["python3", "-m", "kvoffload_exporter"]
    ns = build_parser().parse_args(argv[3:])
    assert ns.concurrency and ns.allow_pressure and ns.control_target == spec.SERVERS[1].url
    assert ns.min_bursts == 10


@pytest.mark.parametrize("shape", ["dp2", "tp2"])
def test_two_gpu_shapes_run_both_servers_on_both_gpus(gpuref: dict[str, ModuleType], shape: str) -> None:
    spec = gpuref["spec"]
    s = spec.SHAPES[shape]
    flag = "--data-parallel-size" if shape == "dp2" else "--tensor-parallel-size"
    for server in spec.SERVERS:
        argv = spec.vllm_argv("python3", s, server)
        assert argv[argv.index(flag) + 1] == "2"
    assert spec.vllm_env(s)["NCCL_NVLS_ENABLE"] == "0"
    sim = spec.simulate_argv("python3", s, spec.SERVERS[0], 1.0, 0)
    assert sim[sim.index("--engines") + 1] == ("2" if shape == "dp2" else "1")


# ---- the rehearsal: the whole run against the simulator -----------------------------------------------------

REHEARSAL = [
    "--rehearse",
    "--levels",
    "1,2",
    "--min-bursts",
    "5",
    "--rounds",
    "5",
    "--min-samples",
    "5",
    "--settle",
    "0.1",
]


def _rehearse(out: Path, shape: str, ports: list[int]) -> subprocess.CompletedProcess[str]:
    argv = ["bash", str(GPUREF / "run.sh"), str(out), shape, *REHEARSAL, "--time-scale", "0.05"]
    argv += ["--ports", *map(str, ports)]
    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, check=False)


@pytest.fixture(scope="module", params=["0.6b", "dp2"])
def rehearsal(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    pick: Callable[[], int] = request.getfixturevalue("free_port")
    out = tmp_path_factory.mktemp("gpuref") / request.param
    r = _rehearse(out, request.param, [pick() for _ in range(3)])
    assert r.returncode == 0, r.stdout + r.stderr
    return request.param, out


def test_rehearsal_leaves_the_documented_files(rehearsal: tuple[str, Path]) -> None:
    _, out = rehearsal
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(
        ["check.json", "requests.jsonl", "clusters.json", "evidence.tgz", "metrics.tgz", "logs.tgz", "summary.json"]
    )
    summary = (out / "summary.json").read_text(encoding="utf-8")
    assert not re.search(r"(?<![\w.~$}-])/(?:work|root|home|tmp)/", summary), "machine paths in recorded evidence"
    with tarfile.open(out / "evidence.tgz") as tar:
        assert {"evidence/requests.jsonl", "evidence/report.json", "evidence/phases.jsonl"} <= set(tar.getnames())
    with tarfile.open(out / "metrics.tgz") as tar:
        member = tar.extractfile("proc_A.txt")  # the independent memory reading of A's process group
        assert member is not None
        proc = member.read().decode("utf-8")
    assert proc.startswith("== /proc/meminfo\n") and re.search(r"^== \d+/smaps_rollup$", proc, re.M)


def test_rehearsal_analysis_reads_the_products_own_bursts(rehearsal: tuple[str, Path]) -> None:
    """Every sweep level of `check` is recomputed from its requests.jsonl, with the same requests per path."""
    _, out = rehearsal
    doc = json.loads((out / "check.json").read_text(encoding="utf-8"))
    result = json.loads((out / "clusters.json").read_text(encoding="utf-8"))
    product = {e["concurrency"]: e for e in doc["load_sweep"]}
    assert sorted(product) == [r["concurrency"] for r in result["levels"]] == [1, 2]
    compared = 0
    for row in result["levels"]:
        want = product[row["concurrency"]]
        if want["bursts_left_out"]:  # requests.jsonl does not say which bursts the product left out
            continue
        assert row["product"]["delta_ms"] == pytest.approx(want["delta_ttft_seconds"] * 1e3, abs=1e-3)
        assert (row["harness"]["n_offload"], row["harness"]["n_control"]) == (want["n_offload"], want["n_control"])
        assert row["harness"]["bursts_offload"] >= 3 and row["harness"]["ci95_ms"][0] is not None
        compared += 1
    assert compared


def test_rehearsal_exporter_saw_both_servers(rehearsal: tuple[str, Path]) -> None:
    shape, out = rehearsal
    with tarfile.open(out / "metrics.tgz") as tar:
        member = tar.extractfile("exporter_metrics.prom")
        assert member is not None
        found = samples(member.read().decode("utf-8"))
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    a, b = (shlex.split(" ".join(summary["servers"][r]["argv"])) for r in "AB")
    url_a = a[a.index("--listen") + 1]
    states = {s.labels["target"]: s.labels["state"] for s in found if s.name == "kvoffload_state" and s.value == 1}
    assert states[url_a] in {"hit", "storing", "idle"} and states[b[b.index("--listen") + 1]] == "not_configured"
    engines = {s.labels["engine"] for s in found if s.labels.get("target") == url_a and "engine" in s.labels}
    assert len(engines) == (2 if shape == "dp2" else 1), engines  # data-parallel ranks are separate engines


def test_record_turns_a_run_into_a_fixture_and_table_rows(rehearsal: tuple[str, Path], tmp_path: Path) -> None:
    shape, out = rehearsal
    doc = tmp_path / "doc.md"
    doc.write_text(f"x\n<!-- gpuref:{shape}:begin -->\n| old |\n<!-- gpuref:{shape}:end -->\ny\n", encoding="utf-8")
    r = subprocess.run(
        [
            sys.executable,
            str(GPUREF / "record.py"),
            str(out),
            str(tmp_path / "fx"),
            "--label",
            shape,
            "--doc",
            str(doc),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert r.returncode == 0, r.stderr
    # The fixture alone reproduces the run's analysis: nothing the tests replay was left behind.
    assert json.loads((tmp_path / "fx" / "clusters.json").read_text()) == json.loads(
        (out / "clusters.json").read_text()
    )
    text = doc.read_text(encoding="utf-8")
    assert "| old |" not in text and text.startswith("x\n") and text.endswith("y\n")
    assert len(re.findall(rf"^\| {re.escape(shape)} \| \d+ \|", text, re.M)) == 2  # one row per level


# ---- recorded load sweeps replay into the reference table ---------------------------------------------------

RECORDED = [
    (p, p.name + suffix)
    for folder, suffix in ((SWEEPS, ""), (SWEEPS.with_name(SWEEPS.name + "-rank"), "-rank"))
    for p in sorted(folder.glob("*"))
    if p.is_dir()
]


@pytest.mark.parametrize("fixture,label", RECORDED)
def test_recorded_sweep_replays_into_the_reference_table(
    gpuref: dict[str, ModuleType], fixture: Path, label: str
) -> None:
    result = gpuref["clusters"].analyze(fixture)
    assert result == json.loads((fixture / "clusters.json").read_text(encoding="utf-8"))
    rows = gpuref["record"].rows(label, result)
    table = TABLE.read_text(encoding="utf-8")
    block = re.search(rf"<!-- gpuref:{re.escape(label)}:begin -->\n(.*?)<!-- gpuref:", table, re.S)
    assert block is not None and block.group(1).splitlines() == rows
