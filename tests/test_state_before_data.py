"""`serve` claims no evidence state before it has a window: against a target that is already hitting, the
first poll (one sample) exports no `kvoffload_state` at all, and no poll before the first `hit` shows
`idle`, `not_storing`, `store_without_load` or `not_configured`.

Why: with one sample the window compared the poll with itself, saw nothing move and exported `idle`
("no traffic") for a target serving hits, until its second poll.
"""

from __future__ import annotations

import asyncio
import itertools

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from kvoffload_exporter.config.settings import Config, TargetConfig
from kvoffload_exporter.enums import State
from kvoffload_exporter.server.app import EXPORTER, make_app
from kvoffload_exporter.sim.engine import SimRequest
from kvoffload_exporter.sim.simulator import SimOptions, Simulator

FORBIDDEN = {State.IDLE, State.NOT_STORING, State.STORE_WITHOUT_LOAD, State.NOT_CONFIGURED}


class HittingTarget:
    """The simulator behind a gate: each poll after the first waits for `release()`, and before answering
    the engine serves one offload hit (seed a prefix, displace it from the GPU, revisit it)."""

    def __init__(self) -> None:
        self.sim = Simulator(
            SimOptions(version="0.33.0", seed=1, time_scale=0.001, noise=False, engine={"num_gpu_blocks": 64})
        )
        self._ids = itertools.count()
        self._gate = asyncio.Event()
        self.served = 0

    async def offload_hit(self) -> None:
        engine = self.sim.engines[0]

        async def submit(prompt: tuple[int, ...]) -> None:
            engine.submit(SimRequest(prompt, max_tokens=2))
            await asyncio.sleep(0.01)  # 10 simulated seconds: the stores complete
            self.sim.advance()

        base = 1_000_000 * (next(self._ids) + 1)
        prefix = tuple(range(base, base + 512))
        await submit(prefix)
        for i in range(4):  # 4 × 32 blocks through a 64-block GPU pool: the prefix leaves the GPU
            await submit(tuple(range(base + 10_000 * (i + 1), base + 10_000 * (i + 1) + 512)))
        await submit(prefix)  # loaded back from the CPU tier

    def release(self) -> None:
        self._gate.set()

    async def metrics(self, request: web.Request) -> web.Response:
        if self.served:
            await self._gate.wait()
            self._gate.clear()
        await self.offload_hit()
        self.served += 1
        return web.Response(text=self.sim.metrics_text(), content_type="text/plain")

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": "0.33.0"})

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/version", self.version)
        return app


def states(body: str) -> set[str]:
    """The states exported as 1 (kvoffload_state is a state set: one series per state)."""
    out = set()
    for line in body.splitlines():
        if line.startswith("kvoffload_state{") and line.endswith(" 1.0"):
            out.add(line.split('state="', 1)[1].split('"', 1)[0])
    return out


async def test_serve_claims_no_state_before_two_polls_of_a_hitting_target() -> None:
    target = HittingTarget()
    for _ in range(3):  # hitting before the exporter starts
        await target.offload_hit()
    upstream = TestServer(target.app())
    await upstream.start_server()
    config = Config(
        targets=(TargetConfig(url=f"http://127.0.0.1:{upstream.port}", name="sim"),),
        poll_interval=0.05,
        timeout=10.0,
        gpu_enabled=False,
        host_enabled=False,
        window=60.0,
    )
    client = TestClient(TestServer(make_app(config)))
    await client.start_server()
    exp = client.server.app[EXPORTER]
    seen: list[set[str]] = []
    bodies: list[str] = []
    try:
        for poll in range(1, 6):
            for _ in range(1000):
                if exp.targets[0].polls >= poll:
                    break
                await asyncio.sleep(0.01)
            assert exp.targets[0].view.up, exp.targets[0].view.last_error
            await asyncio.sleep(0.02)  # past the exporter's merge interval: the scrape shows this poll
            body = await (await client.get("/metrics")).text()
            assert 'kvoffload_up{target="sim"} 1.0' in body
            seen.append(states(body))
            bodies.append(body)
            if State.HIT in seen[-1]:
                break
            target.release()
    finally:
        target.release()
        await client.close()
        await upstream.close()
    assert seen[0] == set(), f"a state claimed from one sample: {seen[0]}"
    assert "kvoffload_state{" not in bodies[0] and "kvoffload_state_reason{" not in bodies[0]
    assert State.HIT in seen[-1], seen
    before_hit = set().union(*seen[:-1])
    assert not before_hit & FORBIDDEN, seen
