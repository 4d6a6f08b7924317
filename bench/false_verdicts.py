"""End to end: how often `check --concurrency` decides when there is nothing to decide, and finds a real effect.

Two identical simulated offload servers (target and control) in the simulator's null setting, where an
offload hit and a recompute cost the same at every concurrency (`--vllm-version 0.33.0
--prefill-ms-per-token 0 --load-gbps 1e6 --load-queue-ms 0 --load-step-ms 0`); `check` is run RUNS times
and every decided level (interval excluding 0) and every advice other than `measure_longer` is a false
verdict. With `--effect-ms X` the target's loads take X ms longer (`--load-queue-ms X`): then a decided
`offload_slower` is a true finding (power). Rates come with their Wilson 95 % interval.

    python bench/false_verdicts.py [--runs 15] [--levels 1,4,16] [--effect-ms 0] [--time-scale 0.25] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import free_port

NULL = ["--vllm-version", "0.33.0", "--prefill-ms-per-token", "0", "--load-gbps", "1e6", "--load-step-ms", "0"]


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a binomial rate k/n."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    d = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, mid - half), min(1.0, mid + half)


@contextmanager
def _server(extra: list[str], seed: int) -> Iterator[str]:
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "kvoffload_exporter",
        "simulate",
        "--listen",
        f"127.0.0.1:{port}",
        "--seed",
        str(seed),
        *extra,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("simulator did not start") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def _check(target: str, control: str, levels: str, out: Path) -> dict[str, object]:
    cmd = [sys.executable, "-m", "kvoffload_exporter", "check", "--target", target, "--control-target", control]
    cmd += ["--allow-pressure", "--quiet", "--json", str(out)]
    if levels:
        cmd += ["--concurrency", levels]
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, timeout=1800)
    return dict(json.loads(out.read_text()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--levels", default="1,4,16")
    ap.add_argument("--effect-ms", type=float, default=0.0)
    ap.add_argument("--time-scale", type=float, default=0.25)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    scale = ["--time-scale", str(args.time_scale)]
    target_extra = [*NULL, "--load-queue-ms", str(args.effect_ms), *scale]
    control_extra = [*NULL, "--load-queue-ms", "0", *scale]
    decided: dict[str, int] = {}
    acted = runs = 0
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            with _server(target_extra, 100 + i) as target, _server(control_extra, 200 + i) as control:
                doc = _check(target, control, args.levels, Path(tmp) / f"{i}.json")
            runs += 1
            rows = doc.get("load_sweep") or [{"concurrency": 1, "verdict": doc["verdict"]}]
            for e in rows:  # type: ignore[union-attr]
                key = f"c={e['concurrency']}"
                decided[key] = decided.get(key, 0) + (e["verdict"] in ("offload_faster", "offload_slower"))
            acted += (doc.get("advice") or {}).get("action") != "measure_longer"  # type: ignore[union-attr]
    report = {
        "runs": runs,
        "effect_ms": args.effect_ms,
        "levels": args.levels,
        "seconds": round(time.monotonic() - started, 1),
        "decided_per_level": {k: {"k": v, "rate": v / runs, "wilson95": wilson(v, runs)} for k, v in decided.items()},
        "advice_not_measure_longer": {"k": acted, "rate": acted / runs, "wilson95": wilson(acted, runs)},
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    what = "false verdicts (null)" if not args.effect_ms else f"decided at a true +{args.effect_ms:g} ms"
    print(f"{runs} check runs, levels {args.levels}, {what}, {report['seconds']} s")
    for k, v in report["decided_per_level"].items():  # type: ignore[attr-defined]
        lo, hi = v["wilson95"]
        print(f"  {k:<6} decided {v['k']}/{runs} = {v['rate']:.0%}  Wilson 95% [{lo:.0%}, {hi:.0%}]")
    lo, hi = report["advice_not_measure_longer"]["wilson95"]  # type: ignore[index]
    print(f"  advice other than measure_longer: {acted}/{runs}  Wilson 95% [{lo:.0%}, {hi:.0%}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
