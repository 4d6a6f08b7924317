#!/usr/bin/env python3
"""Offline analysis of the concurrency sweep (stdlib only): ΔTTFT per level with a bootstrap 95 % CI.

    python3 tools/gpu033/analyze.py SWEEP.jsonl[.gz]... [--json OUT.json]

Statistic: Δ = median client TTFT of the offload path's requests − median of the control's, per level.
Requests of one burst share a scheduler step, so they are not independent: the CI resamples *bursts*
(cluster bootstrap, 5,000 replicates, seed 0) within each path and pools the requests of the drawn
bursts. Also Δp90 (same resampling), the per-burst mean difference paired by round, and what the
offload server's counters did per burst (load bytes, external hit tokens).
"""

import gzip
import json
import math
import random
import sys

REPS = 5000


def load(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        return [json.loads(x) for x in f if x.strip()]


def q(v, p):
    v = sorted(v)
    if not v:
        return math.nan
    k = (len(v) - 1) * p
    lo, hi = math.floor(k), math.ceil(k)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def ttfts(row):
    return [r["ttft_ms"] for r in row["requests"] if r.get("ok") and r.get("ttft_ms") is not None]


def boot(a_bursts, b_bursts, stat, rng):
    out = []
    for _ in range(REPS):
        a = [x for _ in a_bursts for x in a_bursts[rng.randrange(len(a_bursts))]]
        b = [x for _ in b_bursts for x in b_bursts[rng.randrange(len(b_bursts))]]
        out.append(stat(a) - stat(b))
    return q(out, 0.025), q(out, 0.975)


def level_stats(rows, level):
    rng = random.Random(0)
    a = [ttfts(r) for r in rows if r["level"] == level and r["path"] == "offload"]
    b = [ttfts(r) for r in rows if r["level"] == level and r["path"] == "control"]
    a, b = [x for x in a if x], [x for x in b if x]
    if not a or not b:
        return None
    pa, pb = [x for v in a for x in v], [x for v in b for x in v]
    med = lambda v: q(v, 0.5)  # noqa: E731
    p90 = lambda v: q(v, 0.9)  # noqa: E731
    d, ci = med(pa) - med(pb), boot(a, b, med, rng)
    d90, ci90 = p90(pa) - p90(pb), boot(a, b, p90, rng)
    offl = [r for r in rows if r["level"] == level and r["path"] == "offload"]
    paired = {}
    for r in rows:
        if r["level"] == level and ttfts(r):
            paired.setdefault(r["round"], {})[r["path"]] = sum(ttfts(r)) / len(ttfts(r))
    diffs = [v["offload"] - v["control"] for v in paired.values() if len(v) == 2]
    if d is not None and ci[1] < 0:
        verdict = "offload_faster"
    elif ci[0] > 0:
        verdict = "offload_slower"
    else:
        verdict = "no_difference"
    return {
        "concurrency": level,
        "bursts": [len(a), len(b)],
        "requests": [len(pa), len(pb)],
        "failed": sum(1 for r in rows if r["level"] == level for x in r["requests"] if not x.get("ok")),
        "offload_median_ms": med(pa),
        "control_median_ms": med(pb),
        "offload_p90_ms": p90(pa),
        "control_p90_ms": p90(pb),
        "delta_ttft_ms": d,
        "ci95_ms": list(ci),
        "delta_p90_ms": d90,
        "ci95_p90_ms": list(ci90),
        "paired_burst_mean_delta_median_ms": q(diffs, 0.5) if diffs else None,
        "verdict": verdict,
        "offload_load_bytes_per_burst_median": q(
            [r["metrics_delta"].get("kv_offload_load_bytes_total", 0.0) for r in offl], 0.5
        ),
        "offload_ext_hit_tokens_per_burst_median": q(
            [r["metrics_delta"].get("external_prefix_cache_hits_total", 0.0) for r in offl], 0.5
        ),
        "offload_gpu_hit_tokens_per_burst_median": q(
            [r["metrics_delta"].get("prefix_cache_hits_total", 0.0) for r in offl], 0.5
        ),
        "burst_wall_ms_median": [
            q([r["burst_wall_ms"] for r in offl], 0.5),
            q([r["burst_wall_ms"] for r in rows if r["level"] == level and r["path"] == "control"], 0.5),
        ],
    }


def crossover(stats):
    """The first level whose verdict differs from the lowest level's (None: the sign never flips)."""
    if not stats:
        return None
    first = stats[0]["verdict"]
    for s in stats[1:]:
        if s["verdict"] != first:
            return s["concurrency"]
    return None


def table(name, stats):
    print(f"\n### {name}\n")
    print(
        "| c | bursts A/B | requests A/B | offload median (p90) ms | control median (p90) ms "
        "| ΔTTFT median ms [95 % CI] | Δp90 ms [95 % CI] | verdict | load MB/burst | ext-hit tok/burst |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for s in stats:
        print(
            f"| {s['concurrency']} | {s['bursts'][0]}/{s['bursts'][1]} | {s['requests'][0]}/{s['requests'][1]} "
            f"| {s['offload_median_ms']:.1f} ({s['offload_p90_ms']:.1f}) "
            f"| {s['control_median_ms']:.1f} ({s['control_p90_ms']:.1f}) "
            f"| {s['delta_ttft_ms']:+.1f} [{s['ci95_ms'][0]:+.1f}, {s['ci95_ms'][1]:+.1f}] "
            f"| {s['delta_p90_ms']:+.1f} [{s['ci95_p90_ms'][0]:+.1f}, {s['ci95_p90_ms'][1]:+.1f}] "
            f"| {s['verdict']} | {s['offload_load_bytes_per_burst_median'] / 1e6:.1f} "
            f"| {s['offload_ext_hit_tokens_per_burst_median']:.0f} |"
        )
    print(f"\ncrossover (first level whose verdict differs from c={stats[0]['concurrency']}): {crossover(stats)}")


def main(argv):
    out_json = None
    if "--json" in argv:
        i = argv.index("--json")
        out_json = argv[i + 1]
        argv = argv[:i] + argv[i + 2 :]
    result = {}
    for path in argv:
        rows = load(path)
        levels = sorted({r["level"] for r in rows})
        stats = [s for s in (level_stats(rows, c) for c in levels) if s]
        name = path.rsplit("/", 1)[-1]
        table(name, stats)
        shape = rows[0]["server"].rsplit("_", 1)[0] if rows else None
        result[name] = {"shape": shape, "levels": stats, "crossover": crossover(stats)}
    if out_json:
        with open(out_json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
