"""End to end: how often `check --concurrency` decides when there is nothing to decide, and finds a real effect.

One simulated offload server in the simulator's null setting, where an offload hit and a recompute cost the
same at every concurrency (`--vllm-version 0.33.0 --prefill-ms-per-token 0 --load-gbps 1e6 --load-queue-ms 0
--load-step-ms 0`); `check` compares offload hits against the in-band recompute control on that server (no
second server: the recompute control is what enters the decision). `check` is run RUNS times and every run's
per-level verdicts, advice and exit code are kept.

- Null (`--effect slower` with `--effect-ms 0`): a decided level is a false decision; an advice other than
  `measure_longer` (an exit code other than 4) is a false action.
- `--effect slower --effect-ms X`: the target's loads take X ms longer (`--load-queue-ms X`); only
  `offload_slower` counts as found (a decided `offload_faster` is a wrong-sign error, counted apart).
- `--effect faster --effect-ms X`: recomputing costs X ms more than loading (`--prefill-ms-per-token`
  chosen so that the prefix's prefill takes X ms); only `offload_faster` counts as found.

- `--traffic-rate R`: the simulator also serves R background requests a second (`simulate --traffic-rate`),
  which leave some of `check`'s bursts out; each level then reports how often it got an interval at all and
  how many control bursts it counted (the round budget follows the counted bursts).

Rates come with their Wilson 95 % interval, per level and per run.

    python bench/false_verdicts.py [--runs 60] [--levels 1,4,16] [--effect slower|faster] [--effect-ms 0]
        [--traffic-rate 0] [--jobs 2] [--time-scale 0.25] [--settle 0.05] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import free_port
from kvoffload_exporter.canary.cycle.stats import wilson

PREFIX_TOKENS = 1024  # `check --prefix-tokens`: the faster effect's prefill is spread over these tokens
DECIDED = ("offload_faster", "offload_slower")


def server_args(effect: str, effect_ms: float, scale: float, traffic_rate: float = 0.0) -> list[str]:
    """The simulator's flags for one run: the null setting, with the effect (if any) on one side."""
    prefill = effect_ms / PREFIX_TOKENS if effect == "faster" else 0.0  # recompute pays the prefix's prefill
    queue = effect_ms if effect == "slower" else 0.0  # an offload hit waits this much longer for its load
    traffic = ["--traffic-rate", str(traffic_rate)] if traffic_rate > 0 else []
    return [
        *("--vllm-version", "0.33.0", "--load-gbps", "1e6", "--load-step-ms", "0"),
        *("--prefill-ms-per-token", str(prefill), "--load-queue-ms", str(queue), "--time-scale", str(scale)),
        *traffic,
    ]


@contextmanager
def _server(extra: list[str], seed: int) -> Iterator[str]:
    port = free_port()
    cmd = [sys.executable, "-m", "kvoffload_exporter", "simulate", "--listen", f"127.0.0.1:{port}"]
    proc = subprocess.Popen([*cmd, "--seed", str(seed), *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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


def one_run(i: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """One `check` against a fresh simulator: its exit code, advice and per-level verdicts."""
    out = tmp / f"{i}.json"
    with _server(server_args(args.effect, args.effect_ms, args.time_scale, args.traffic_rate), 100 + i) as target:
        cmd = [sys.executable, "-m", "kvoffload_exporter", "check", "--target", target, "--allow-pressure"]
        cmd += ["--quiet", "--json", str(out), "--settle", str(args.settle), "--seed", str(i)]
        cmd += ["--prefix-tokens", str(PREFIX_TOKENS), "--secret-file", str(tmp / f"{i}.secret")]
        if args.levels:
            cmd += ["--concurrency", args.levels]
        rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, timeout=1800)
    doc = json.loads(out.read_text())
    rows = doc.get("load_sweep") or [{"concurrency": 1, "verdict": doc["verdict"]}]
    return {
        "exit_code": rc.returncode,
        "advice": (doc.get("advice") or {}).get("action"),
        "levels": {f"c={e['concurrency']}": e["verdict"] for e in rows},
        # rounds each level took (the rounds for c = 1): early stopping shows here
        "rounds": {f"c={e['concurrency']}": e.get("rounds") for e in rows},
        # whether the level got an interval at all, and the control bursts it counted (background traffic)
        "interval": {f"c={e['concurrency']}": e.get("ci_low_seconds") is not None for e in rows},
        "bursts_control": {f"c={e['concurrency']}": e.get("bursts_control") for e in rows},
    }


def summarise(runs: list[dict[str, Any]], effect: str, effect_ms: float) -> dict[str, Any]:
    """Per level: decided (any sign), found (the true sign), wrong sign; per run: any action, exit codes."""
    n = len(runs)
    right = None if effect_ms == 0 else ("offload_slower" if effect == "slower" else "offload_faster")

    def rate(k: int) -> dict[str, Any]:
        lo, hi = wilson(k, n)
        return {"k": k, "n": n, "rate": round(k / n, 4) if n else None, "wilson95": [round(lo, 4), round(hi, 4)]}

    levels = sorted({k for r in runs for k in r["levels"]}, key=lambda s: int(s[2:]))
    per_level = {}
    for lv in levels:
        verdicts = [r["levels"].get(lv) for r in runs]
        row: dict[str, Any] = {"decided": rate(sum(v in DECIDED for v in verdicts))}
        if all("interval" in r for r in runs):
            row["interval"] = rate(sum(bool(r["interval"].get(lv)) for r in runs))
            row["bursts_control"] = sorted(r["bursts_control"].get(lv) or 0 for r in runs)
        if right:
            row["found"] = rate(sum(v == right for v in verdicts))
            row["wrong_sign"] = rate(sum(v in DECIDED and v != right for v in verdicts))
        per_level[lv] = row
    return {
        "runs": n,
        "effect": effect if effect_ms else "none",
        "effect_ms": effect_ms,
        "per_level": per_level,
        "any_action": rate(sum(r["advice"] != "measure_longer" for r in runs)),
        "any_level_decided": rate(sum(any(v in DECIDED for v in r["levels"].values()) for r in runs)),
        "all_levels_found": rate(sum(all(v == right for v in r["levels"].values()) for r in runs)) if right else None,
        "exit_codes": dict(sorted(Counter(str(r["exit_code"]) for r in runs).items())),
        "rounds_per_level": {lv: sorted(r["rounds"].get(lv) or 0 for r in runs if "rounds" in r) for lv in levels},
        "advice": dict(sorted(Counter(str(r["advice"]) for r in runs).items())),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--levels", default="1,4,16")
    ap.add_argument("--effect", choices=("slower", "faster"), default="slower")
    ap.add_argument("--effect-ms", type=float, default=0.0)
    ap.add_argument("--traffic-rate", type=float, default=0.0, help="background requests a second on the simulator")
    ap.add_argument("--jobs", type=int, default=2, help="check runs at once (each with its own simulator)")
    ap.add_argument("--time-scale", type=float, default=0.25)
    ap.add_argument("--settle", type=float, default=0.05)
    ap.add_argument("--json", metavar="FILE", help="also write the summary and every run here")
    args = ap.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max(1, args.jobs)) as pool:
        runs = list(pool.map(lambda i: one_run(i, args, Path(tmp)), range(args.runs)))
    report = {
        "levels": args.levels,
        "traffic_rate": args.traffic_rate,
        "seconds": round(time.monotonic() - started, 1),
        **summarise(runs, args.effect, args.effect_ms),
    }
    if args.json:
        Path(args.json).write_text(json.dumps({**report, "each_run": runs}, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
