"""`inspect` obeys the exporter's caps (file size, label length, series) and `--json` is always JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

LB = 'engine="0",model_name="m"'


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvoffload_exporter", *args], capture_output=True, text=True, timeout=120
    )


def _strict_json(text: str) -> object:
    def refuse(name: str) -> None:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_inspect_json_is_valid_json_with_null_where_undefined(tmp_path: Path) -> None:
    a, b = tmp_path / "a.prom", tmp_path / "b.prom"
    a.write_text(f"vllm:kv_offload_load_bytes_total{{{LB}}} 0\nvllm:kv_offload_store_bytes_total{{{LB}}} 0\n")
    # 1.7e308 bytes loaded for 1e-10 stored bytes: the ratio overflows a float (Infinity on main).
    b.write_text(
        f"vllm:kv_offload_load_bytes_total{{{LB}}} 1.7e308\nvllm:kv_offload_store_bytes_total{{{LB}}} 1e-10\n"
        f"vllm:kv_offload_load_time_total{{{LB}}} 1e-300\n"
    )
    r = _run("inspect", str(a), str(b), "--json")
    assert r.returncode == 0, r.stderr
    (e,) = _strict_json(r.stdout)["engines"]  # type: ignore[index]
    assert e["load_store_ratio"] is None and e["load_bandwidth_bytes_per_second"] is None
    assert e["gpu_prefix_hit_ratio"] is None


def test_inspect_refuses_a_file_over_the_body_cap_with_one_line(tmp_path: Path) -> None:
    big = tmp_path / "big.prom"
    with big.open("w") as f:
        f.write(f"vllm:prefix_cache_hits_total{{{LB}}} 1\n")
        f.write("# filler\n" * (17 * 1024 * 1024 // 9))
    r = _run("inspect", str(big))
    assert r.returncode != 0 and "larger than" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_inspect_refuses_a_huge_label_with_label_limit(tmp_path: Path) -> None:
    f = tmp_path / "huge.prom"
    f.write_text(f'vllm:prefix_cache_hits_total{{engine="0",model_name="{"m" * 2_000_000}"}} 1\n')
    r = _run("inspect", str(f), "--json")
    assert r.returncode != 0 and "label_limit" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and len(r.stderr) < 300


def test_inspect_refuses_too_many_series_with_sample_limit(tmp_path: Path) -> None:
    f = tmp_path / "many.prom"
    f.write_text("".join(f'vllm:prefix_cache_hits_total{{engine="{i}",model_name="m"}} 1\n' for i in range(30_000)))
    r = _run("inspect", str(f))
    assert r.returncode != 0 and "sample_limit" in r.stderr and "Traceback" not in r.stderr


def test_inspect_joins_count_against_one_cap_in_memory_too(tmp_path: Path) -> None:
    """40 joined parts of a 10 MiB file read one cap in all (not 40), then are refused with one line."""
    part = tmp_path / "part.prom"
    with part.open("wb") as f:
        f.truncate(10 << 20)  # sparse: only what is read costs memory
    joined = "+".join([str(part)] * 40)
    code = (
        "import runpy, sys\n"
        f"sys.argv = ['kvoffload-exporter', 'inspect', {joined!r}]\n"
        "try:\n    runpy.run_module('kvoffload_exporter', run_name='__main__')\n"
        "except SystemExit as e:\n    print(e.code, file=sys.stderr)\n"
        # VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss over exec from the (large) pytest parent
        "print(next(ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('VmHWM:')))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "larger than" in r.stderr and "Traceback" not in r.stderr
    assert int(r.stdout.split()[-1]) < 160 * 1024, "more than 160 MiB peak RSS for a refused 40-part join"


def test_inspect_refuses_an_endless_device_unread() -> None:
    r = _run("inspect", "/dev/zero+/dev/zero")
    assert r.returncode != 0 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "/dev/zero: it is a character device, not a regular file" in r.stderr
