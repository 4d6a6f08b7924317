"""Host and GPU sources against fake /proc and cgroup trees, and the GPU collector without a driver."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from kvoffload_exporter.config.settings import Config, TargetConfig
from kvoffload_exporter.derive import procmem
from kvoffload_exporter.enums import Generation, MemorySource, ProcessRole
from kvoffload_exporter.expose.collector import TargetView, collect
from kvoffload_exporter.ingest.snapshot import EngineSignals, HostMemory, Snapshot
from kvoffload_exporter.server.app import EXPORTER, make_app
from kvoffload_exporter.sources import host
from kvoffload_exporter.sources.gpu import GpuUnavailable, Nvml
from tests.support.prom import one, samples

STATUS = """Name:\tpython3
VmHWM:\t 1000 kB
VmRSS:\t  2048 kB
VmLck:\t    64 kB
VmPin:\t     0 kB
Threads:\t4
"""


def test_parse_status_reads_kb_fields() -> None:
    st = host.parse_status(STATUS)
    assert st["VmRSS"] == 2048 * 1024 and st["VmLck"] == 64 * 1024 and st["VmPin"] == 0
    assert "Threads" not in st


def test_cgroup_v2(tmp_path: Path) -> None:
    (tmp_path / "memory.max").write_text("8589934592\n")
    (tmp_path / "memory.current").write_text("1073741824\n")
    assert host.read_cgroup(str(tmp_path)) == (8589934592.0, 1073741824.0)
    (tmp_path / "memory.max").write_text("max\n")
    assert host.read_cgroup(str(tmp_path)) == (None, 1073741824.0)


def test_cgroup_v1_unlimited_is_none(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (tmp_path / "memory" / "memory.usage_in_bytes").write_text("5000\n")
    assert host.read_cgroup(str(tmp_path)) == (None, 5000.0)


def test_no_cgroup(tmp_path: Path) -> None:
    assert host.read_cgroup(str(tmp_path)) == (None, None)


def _fake_tree(tmp_path: Path) -> tuple[str, str]:
    (tmp_path / "proc" / "42").mkdir(parents=True)
    (tmp_path / "proc" / "42" / "status").write_text(STATUS)
    (tmp_path / "proc" / "42" / "cgroup").write_text("0::/kubepods/pod1/vllm\n")
    (tmp_path / "cg" / "kubepods" / "pod1" / "vllm").mkdir(parents=True)
    (tmp_path / "cg" / "kubepods" / "pod1" / "vllm" / "memory.max").write_text("1000\n")
    (tmp_path / "cg" / "kubepods" / "pod1" / "vllm" / "memory.current").write_text("900\n")
    (tmp_path / "cg" / "memory.max").write_text("50\n")  # the exporter's own (sidecar) limit
    (tmp_path / "cg" / "memory.current").write_text("10\n")
    return str(tmp_path / "proc"), str(tmp_path / "cg")


def test_read_host_uses_the_vllm_process_cgroup(tmp_path: Path) -> None:
    proc, cg = _fake_tree(tmp_path)
    m = host.read_host(proc, cg, [("a", [42, 43])])
    assert [(p.pid, p.rss, p.locked) for p in m.processes] == [(42, 2048 * 1024, 64 * 1024)]  # 43 vanished
    assert (m.cgroup_limit, m.cgroup_usage) == (1000.0, 900.0)
    assert m.headroom == 100.0  # the vLLM container's limit - usage caps host available
    assert m.total > 0


def test_read_host_never_reads_own_cgroup_in_auto_mode(tmp_path: Path) -> None:
    proc, cg = _fake_tree(tmp_path)
    m = host.read_host(proc, cg, [("a", [])])  # vLLM process not visible (sidecar without shared PIDs)
    assert (m.cgroup_limit, m.cgroup_usage) == (None, None)
    assert host.read_host(proc, cg, [("a", [])], "self").cgroup_limit == 50.0
    assert host.read_host(proc, cg, [("a", [42])], "off").cgroup_limit is None


def test_cgroup_of_v1_and_v2(tmp_path: Path) -> None:
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cgroup").write_text("12:cpu,cpuacct:/x\n4:memory:/docker/abc\n0::/\n")
    assert host.cgroup_of(7, str(tmp_path)) == "/docker/abc"
    assert host.cgroup_of(8, str(tmp_path)) is None


def test_pids_for_pidfile_and_children(tmp_path: Path) -> None:
    pidfile = tmp_path / "vllm.pid"
    pidfile.write_text(f"{os.getpid()}\n")
    assert host.pids_for(None, str(pidfile), None)[0] == os.getpid()
    assert host.pids_for(None, str(tmp_path / "missing"), None) == []
    assert host.pids_for(2**22 + 12345, None, None) == []  # no such process


def test_nvml_without_driver_raises_gpu_unavailable() -> None:
    nvml = Nvml()
    try:
        nvml.start()
    except GpuUnavailable:
        with pytest.raises(GpuUnavailable):
            nvml.read()
        return
    try:  # a machine with a GPU: reading must work
        assert all(d.total >= d.used for d in nvml.read())
    finally:
        nvml.stop()


async def test_gpu_failure_does_not_stop_the_rest() -> None:
    config = Config(
        targets=(TargetConfig(url="http://127.0.0.1:9", name="x", pid=os.getpid()),),
        poll_interval=0.05,
        timeout=0.2,
        window=10.0,
        gpu_enabled=True,
    )
    async with TestClient(TestServer(make_app(config))) as client:
        exp = client.server.app[EXPORTER]
        for _ in range(200):
            if "gpu" in exp.collectors and "host" in exp.collectors:
                break
            await asyncio.sleep(0.02)
        text = await (await client.get("/metrics")).text()
        assert 'kvoffload_exporter_collector_success{collector="host"} 1.0' in text
        assert 'kvoffload_engine_process_resident_memory_bytes{target="x",role="api_server",rank="0"}' in text
        assert 'kvoffload_engine_process_tree_memory_info{target="x",source="smaps_rollup"} 1.0' in text
        assert "kvoffload_host_memory_headroom_bytes" in text
        if not exp.collectors["gpu"][0]:
            assert 'kvoffload_exporter_collector_success{collector="gpu"} 0.0' in text
            assert "kvoffload_gpu_memory_total_bytes" not in text


# --- process-tree memory (fake /proc tree in tests/fixtures/proc, see its README) ---------------------

PROC = Path(__file__).parent / "fixtures" / "proc"
CGROUP = PROC / "sysfs-cgroup"
TREE = [613, 640, 650, 660, 661]  # API server first (the tree root), as pids_for returns it
KB, GIB = 1024.0, float(2**30)


def test_parse_smaps_rollup_skips_the_header_and_reads_kb_fields() -> None:
    r = procmem.parse_smaps_rollup((PROC / "660" / "smaps_rollup").read_text())
    assert r["Pss_Shmem"] == 7689557 * KB and r["Pss"] == 9389557 * KB and r["Locked"] == 64 * KB
    assert not any("rollup" in k or "-" in k for k in r)


def test_tree_counts_shared_memory_once_where_summing_per_pid_rss_double_counts() -> None:
    m = host.read_host(str(PROC), str(CGROUP), [("a", TREE)])
    (tree,) = m.trees
    per_pid_shmem = sum(host.parse_status((PROC / str(p) / "status").read_text())["RssShmem"] for p in TREE)
    assert per_pid_shmem == 17 * GIB  # the 1 GiB segment mapped by three processes, counted three times
    assert tree.source == MemorySource.SMAPS_ROLLUP
    assert tree.shmem == 15 * GIB  # 14 GiB tier + the 1 GiB segment once
    assert tree.shmem == procmem.parse_memory_stat((CGROUP / "kubepods/pod1/vllm/memory.stat").read_text())["shmem"]
    assert tree.rss_sum is not None and tree.pss is not None and tree.rss_sum - tree.pss > 2 * GIB
    assert tree.rss_sum == sum(p.rss or 0.0 for p in m.processes)
    assert tree.anon == (880640 + 9000 + 1200000 + 2 * 1500000) * KB
    assert (tree.locked, tree.pinned, tree.processes) == (64 * KB, 0.0, 5)


def test_tree_falls_back_to_the_cgroup_memory_stat_when_a_smaps_rollup_is_unreadable(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    shutil.copytree(PROC, proc)
    (proc / "650" / "smaps_rollup").unlink()  # e.g. another user's process without CAP_SYS_PTRACE
    (tree,) = host.read_host(str(proc), str(CGROUP), [("a", TREE)]).trees
    assert tree.source == MemorySource.CGROUP  # a partial Σ Pss_Shmem would undercount
    assert tree.shmem == 15 * GIB and tree.pss is None
    assert tree.cgroup_headroom == 24 * GIB - 22949371904
    (tree,) = host.read_host(str(proc), str(CGROUP), [("a", TREE)], "off").trees
    assert (tree.source, tree.shmem, tree.cgroup_headroom) == (MemorySource.STATUS, None, None)
    assert tree.anon == (880640 + 9000 + 1200000 + 2 * 1500000) * KB  # Σ RssAnon


def test_process_series_are_keyed_by_role_and_rank_from_the_vllm_titles() -> None:
    m = host.read_host(str(PROC), str(CGROUP), [("a", TREE)])
    assert [(p.pid, p.role, p.rank) for p in m.processes] == [
        (613, ProcessRole.API_SERVER, "0"),
        (640, ProcessRole.HELPER, "0"),
        (650, ProcessRole.ENGINE_CORE, "0"),
        (660, ProcessRole.WORKER, "0"),
        (661, ProcessRole.WORKER, "1"),
    ]


def _renumbered(tmp_path: Path, offset: int) -> list[int]:
    """The same tree after a restart: new pids, children listed in another order."""
    proc = tmp_path / "proc"
    proc.mkdir()
    for pid in TREE:
        shutil.copytree(PROC / str(pid), proc / str(pid + offset))
    return [613 + offset, 661 + offset, 650 + offset, 640 + offset, 660 + offset]


def _process_series(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for s in samples(text)
        if s.name.startswith("kvoffload_engine_process_")
    }


def test_a_restart_with_new_pids_keeps_every_process_series(tmp_path: Path) -> None:
    before = collect([], "5m", host.read_host(str(PROC), str(CGROUP), [("a", TREE)]))
    pids = _renumbered(tmp_path, 10000)
    after = collect([], "5m", host.read_host(str(tmp_path / "proc"), str(CGROUP), [("a", pids)]))
    assert _process_series(before) == _process_series(after)
    assert "pid=" not in "".join(line for line in before.splitlines() if line.startswith("kvoffload_engine_process_"))
    assert len([k for k in _process_series(before) if k[0] == "kvoffload_engine_process_resident_memory_bytes"]) == 5


@pytest.mark.parametrize(
    ("name", "cmdline", "want"),
    [
        ("VLLM::EngineCor", "VLLM::EngineCore_DP1", (ProcessRole.ENGINE_CORE, "1")),
        ("VLLM::EngineCor", "", (ProcessRole.ENGINE_CORE, None)),  # comm is cut at 15 characters
        ("python3", "VllmWorker-3", (ProcessRole.WORKER, "3")),
        ("VLLM::Worker_PP", "VLLM::Worker_PP1_TP0", (ProcessRole.WORKER, "1_0")),
        ("VLLM::APIServer", "VLLM::APIServer_2", (ProcessRole.API_SERVER, "2")),
        ("python3", "python3 -m vllm.entrypoints.openai.api_server --model m", (ProcessRole.API_SERVER, None)),
        ("python3", "python3 -c from multiprocessing.resource_tracker import main;main(24)", (None, None)),
        ("vllm", "vllm serve /models/MyWorker_7", (ProcessRole.API_SERVER, None)),  # no match inside a path
    ],
)
def test_classify_vllm_process_titles(name: str, cmdline: str, want: tuple[ProcessRole | None, str | None]) -> None:
    assert procmem.classify(name, cmdline) == want


def test_rank_ties_are_broken_by_pid_whatever_the_listing_order() -> None:
    def s(pid: int, cmd: str) -> procmem.ProcSample:
        return procmem.ProcSample(pid, "x", cmd, {})

    tree = [
        s(10, "vllm serve m"),
        s(30, "VLLM::EngineCore_DP0"),
        s(20, "VLLM::EngineCore_DP0"),
        s(25, "py"),
        s(5, "py"),
    ]
    got = {x.pid: (x.role, x.rank) for x in procmem.process_rows("a", tree)}
    assert got[20] == (ProcessRole.ENGINE_CORE, "0") and got[30] == (ProcessRole.ENGINE_CORE, "0.1")
    assert got[5] == (ProcessRole.HELPER, "0") and got[25] == (ProcessRole.HELPER, "1")
    assert procmem.process_rows("a", list(reversed(tree[1:])) + tree[:1])[-1].role == ProcessRole.API_SERVER


def test_footprint_ratio_and_growth_step() -> None:
    (tree,) = host.read_host(str(PROC), str(CGROUP), [("a", TREE)], tiers={"a": 8e9}).trees
    assert procmem.footprint_ratio(tree) == pytest.approx(15 * GIB / 8e9)  # 2.01: over the 1.5 alert line
    assert procmem.growth_step(tree) == procmem.MIN_GROWTH_STEP_BYTES  # the tier is fully resident
    (tree,) = host.read_host(str(PROC), str(CGROUP), [("a", TREE)], tiers={"a": 32e9}).trees
    assert procmem.growth_step(tree) == 32e9 - 15 * GIB  # still pinning its tier
    (tree,) = host.read_host(str(PROC), str(CGROUP), [("a", TREE)]).trees
    assert procmem.footprint_ratio(tree) is None and procmem.growth_step(tree) == procmem.MIN_GROWTH_STEP_BYTES


def test_tier_bytes_of_a_target_sum_its_dp_engines() -> None:
    def engine(rank: str) -> EngineSignals:
        return EngineSignals("m", rank, {}, cache_config={"kv_offloading_size": "8"})

    snap = Snapshot(Generation.FLAT, (engine("0"), engine("1")))
    assert TargetView("a", "u", up=True, snapshot=snap).total_tier_bytes == 16 * GIB
    assert TargetView("a", "u", up=True, snapshot=Snapshot(Generation.NONE, ())).total_tier_bytes is None
    assert TargetView("a", "u").total_tier_bytes is None


def test_exposition_carries_the_tree_the_source_and_the_ratio() -> None:
    m = host.read_host(str(PROC), str(CGROUP), [("a", TREE)], tiers={"a": 8e9})
    text = collect([], "5m", m)
    assert one(text, "kvoffload_engine_process_tree_memory_info", target="a", source="smaps_rollup") == 1.0
    assert one(text, "kvoffload_engine_process_tree_shmem_bytes", target="a") == 15 * GIB
    assert one(text, "kvoffload_engine_process_tree_resident_sum_bytes", target="a") > 17 * GIB
    assert one(text, "kvoffload_tier_footprint_ratio", target="a") == pytest.approx(2.013, abs=1e-3)
    assert one(text, "kvoffload_engine_process_tree_growth_step_bytes", target="a") == GIB
    assert one(text, "kvoffload_engine_process_tree_cgroup_headroom_bytes", target="a") == 24 * GIB - 22949371904
    bare = collect([], "5m", HostMemory(1.0, 1.0, None, None))
    assert "kvoffload_engine_process_tree" not in bare and "footprint" not in bare


def test_smaps_cache_rereads_when_stale_or_when_shared_memory_moved(tmp_path: Path) -> None:
    """smaps_rollup walks every resident page (≈ 250 ms for a 14 GiB tier): read it once a minute."""
    proc = tmp_path / "proc"
    shutil.copytree(PROC / "650", proc / "650")
    now = [0.0]
    cache = host.SmapsCache(max_age=60.0, clock=lambda: now[0])
    rollup = proc / "650" / "smaps_rollup"

    def pss_shmem() -> float | None:
        (tree,) = host.read_host(str(proc), str(CGROUP), [("a", [650])], smaps=cache).trees
        return tree.shmem

    assert pss_shmem() == 349526 * KB
    rollup.write_text(rollup.read_text().replace("349526", "349600"))
    now[0] = 30.0
    assert pss_shmem() == 349526 * KB  # cached: fresh enough and RssShmem unchanged
    now[0] = 61.0
    assert pss_shmem() == 349600 * KB  # stale: re-read
    status = proc / "650" / "status"
    status.write_text(status.read_text().replace(" 1048576 kB", " 2097152 kB"))
    rollup.write_text(rollup.read_text().replace("349600", "700000"))
    now[0] = 62.0
    assert pss_shmem() == 700000 * KB  # RssShmem doubled (a tier being pinned): re-read at once
