"""Host and GPU sources against fake /proc and cgroup trees, and the GPU collector without a driver."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from exporter.app import EXPORTER, make_app
from exporter.config import Config, TargetConfig
from exporter.sources import host
from exporter.sources.gpu import GpuUnavailable, Nvml

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
        assert 'kvoffload_collector_success{collector="host"} 1.0' in text
        assert f'kvoffload_process_resident_memory_bytes{{target="x",pid="{os.getpid()}"}}' in text
        assert "kvoffload_host_memory_headroom_bytes" in text
        if not exp.collectors["gpu"][0]:
            assert 'kvoffload_collector_success{collector="gpu"} 0.0' in text
            assert "kvoffload_gpu_memory_total_bytes" not in text
