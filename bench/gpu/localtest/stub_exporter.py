#!/usr/bin/env python3
"""Stand-in for `python3 -m exporter serve|check` with the flags device_step.sh passes, used only by
localtest/run_local.sh to test the device-side plumbing before the real sub-commands exist.
It is NOT the exporter: serve only re-exports an up/scrape count per target, check only sends a few
canary requests and writes a JSON file plus an evidence folder.
"""

import argparse
import asyncio
import json
import os
import random
import sys
import time
import urllib.request

from aiohttp import ClientSession, ClientTimeout, web


def cmd_serve(a):
    state = {u: {"up": 0, "n": 0} for u in a.target}

    async def poll(app):
        async def loop():
            async with ClientSession(timeout=ClientTimeout(total=5)) as s:
                while True:
                    for u in a.target:
                        try:
                            async with s.get(u + "/metrics") as r:
                                await r.text()
                                state[u]["up"] = int(r.status == 200)
                        except Exception:
                            state[u]["up"] = 0
                        state[u]["n"] += 1
                    await asyncio.sleep(a.poll_interval)

        app["t"] = asyncio.create_task(loop())
        yield
        app["t"].cancel()

    async def metrics(_r):
        lines = ["# TYPE kvo_stub_target_up gauge"]
        lines += [f'kvo_stub_target_up{{target="{u}"}} {v["up"]}' for u, v in state.items()]
        lines += ["# TYPE kvo_stub_polls_total counter"]
        lines += [f'kvo_stub_polls_total{{target="{u}"}} {v["n"]}' for u, v in state.items()]
        return web.Response(text="\n".join(lines) + "\n")

    app = web.Application()
    app.cleanup_ctx.append(poll)
    app.add_routes([web.get("/metrics", metrics)])
    host, port = a.listen.rsplit(":", 1)
    web.run_app(app, host=host, port=int(port), print=None)
    return 0


def ttft(url, toks, salt=None):
    body = {"model": "x", "prompt": toks, "max_tokens": 1, "stream": True}
    if salt:
        body["cache_salt"] = salt
    req = urllib.request.Request(
        url + "/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=60) as r:
        r.readline()
        d = time.perf_counter() - t
        r.read()
    return round(d * 1e3, 3)


def cmd_check(a):
    rng = random.Random(1)
    P = [rng.randrange(1000, 150000) for _ in range(2000)]
    res = {"stub": True, "target": a.target, "control": a.control_target, "rounds": []}
    os.makedirs(a.out, exist_ok=True)
    for i in range(a.rounds):
        row = {"round": i, "target_ms": ttft(a.target, P, salt=None if i else "cold")}
        if a.control_target:
            row["control_ms"] = ttft(a.control_target, P)
        res["rounds"].append(row)
        with open(os.path.join(a.out, f"round_{i:02d}.json"), "w") as f:
            json.dump(row, f)
    os.makedirs(os.path.join(a.out, "sub"), exist_ok=True)
    with open(os.path.join(a.out, "sub", "note.txt"), "w") as f:
        f.write("nested evidence file\n")
    with open(a.json, "w") as f:
        json.dump(res, f, indent=1)
    print(f"stub check: {len(res['rounds'])} rounds -> {a.json}")
    return 0


def main():
    p = argparse.ArgumentParser(prog="stub_exporter")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--target", action="append", required=True)
    s.add_argument("--listen", required=True)
    s.add_argument("--poll-interval", type=float, default=1.0)
    c = sub.add_parser("check")
    c.add_argument("--target", required=True)
    c.add_argument("--control-target")
    c.add_argument("--rounds", type=int, default=10)
    c.add_argument("--allow-pressure", action="store_true")
    c.add_argument("--json", required=True)
    c.add_argument("--out", required=True)
    a = p.parse_args()
    return cmd_serve(a) if a.cmd == "serve" else cmd_check(a)


if __name__ == "__main__":
    sys.exit(main())
