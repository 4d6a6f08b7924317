"""Every fault: what the simulator does, and what the exporter (normalise → derive, HTTP source) makes of it."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from support.prom import series
from support.scenario import ManualClock

from kvoffload_exporter.derive.window import interval
from kvoffload_exporter.ingest.normalise import normalise
from kvoffload_exporter.sim.engine import SimRequest
from kvoffload_exporter.sim.faults import FAULTS, FaultError, parse_fault
from kvoffload_exporter.sim.server import make_app
from kvoffload_exporter.sim.simulator import SimOptions, Simulator, pad, truncate
from kvoffload_exporter.sources.vllm_http import ScrapeError, fetch_metrics

P = tuple(range(1000, 7000))
KEY = ("Qwen/Qwen3-0.6B", "0")


def manual(**opts: Any) -> tuple[Simulator, ManualClock]:
    clock = ManualClock()
    return Simulator(SimOptions(seed=5, noise=False, **opts), clock=clock, wall=lambda: 1.7e9 + clock.now), clock


def send(sim: Simulator, clock: ManualClock, prompt: tuple[int, ...], **kw: Any) -> None:
    plan = sim.engines[0].submit(SimRequest(prompt, max_tokens=1, **kw), clock())
    clock.now = plan.finish_at + 0.5
    sim.engines[0].submit(SimRequest((1, 2, 3, 4), max_tokens=1), clock())  # flush: stores get reported
    clock.now += 1.0


def evict(sim: Simulator, clock: ManualClock) -> None:
    for base in (100_000, 200_000):
        send(sim, clock, tuple(range(base, base + 6000)))


def canary(sim: Simulator, clock: ManualClock) -> None:
    """Cold, GPU hit, eviction, then the prompt again (a CPU-tier hit when the tier works)."""
    send(sim, clock, P)
    send(sim, clock, P)
    evict(sim, clock)
    send(sim, clock, P)


def state_over(sim: Simulator, clock: ManualClock, action: Any) -> Any:
    before = normalise(sim.metrics_text())
    action(sim, clock)
    return interval(before, normalise(sim.metrics_text()))[KEY]


def test_fault_names_and_arguments() -> None:
    assert str(parse_fault("rename=legacy-only")) == "rename=legacy-only"
    assert parse_fault("slow-load").number() == 10
    assert parse_fault("completions-status").number() == 503
    for bad in (
        "nope",
        "rename=sideways",
        "slow-load=0",
        "metrics-huge=x",
        "restart=-1",
        "completions-status=200",
        "completions-status=4xx",
    ):
        with pytest.raises(FaultError):
            parse_fault(bad)
    assert set(FAULTS) == {
        "store-without-load",
        "slow-load",
        "no-connector",
        "restart",
        "rename",
        "metrics-500",
        "metrics-slow",
        "metrics-truncated",
        "metrics-huge",
        "down",
        "completions-status",
        "store-errors",
        "corrupt-loads",
        "promotion-failures",
        "load-errors",
        "backpressure",
        "nan-logits",
    }


def test_healthy_tier_is_a_hit() -> None:
    sim, clock = manual()
    d = state_over(sim, clock, canary)
    assert d.state == "hit" and d.deltas["offload_load_bytes"] == 682_622_976


def test_store_without_load_state() -> None:
    sim, clock = manual(faults=("store-without-load",))
    canary(sim, clock)  # the tier holds stores before the interval starts (else: warm-up, `storing`)
    d = state_over(sim, clock, canary)
    assert d.state == "store_without_load"
    assert d.deltas["offload_load_bytes"] == 0 and d.deltas["external_prefix_hits"] == 0
    assert d.deltas["offload_store_bytes"] == 5 * 682_622_976  # P's chunks are written twice


def test_no_connector_state_and_families() -> None:
    sim, clock = manual()
    sim.update_faults(add=["no-connector"])
    d = state_over(sim, clock, canary)
    assert d.state == "not_configured"
    assert "vllm:kv_offload_" not in sim.metrics_text()
    sim.update_faults(remove=["no-connector"])
    assert "vllm:kv_offload_store_bytes_total" in sim.metrics_text()


def test_restart_resets_counters_without_negative_deltas() -> None:
    sim, clock = manual()
    canary(sim, clock)
    before_text = sim.metrics_text()
    created = [ln for ln in before_text.splitlines() if ln.startswith("vllm:prompt_tokens_created")]
    clock.now += 5
    assert sim.update_faults(add=["restart"]) == []  # one-shot: acts, then is not listed
    after_text = sim.metrics_text()
    assert series(after_text)["vllm:prompt_tokens_total"] == 0
    assert [ln for ln in after_text.splitlines() if ln.startswith("vllm:prompt_tokens_created")] != created
    send(sim, clock, P)
    d = interval(normalise(before_text), normalise(sim.metrics_text()))[KEY]
    assert all(v >= 0 for v in d.deltas.values())
    assert d.deltas["prompt_tokens"] == 6004


def test_periodic_restart() -> None:
    sim, clock = manual(faults=("restart=30",))
    send(sim, clock, P)
    assert series(sim.metrics_text())["vllm:prompt_tokens_total"] == 6004
    clock.now += 31
    assert series(sim.metrics_text())["vllm:prompt_tokens_total"] == 0
    assert sim.faults.names() == ["restart=30"]


@pytest.mark.parametrize(
    "variant,generation,legacy,flat",
    [
        ("flat-only", "flat", False, True),
        ("legacy-only", "transfer_type", True, False),
        ("underscores", "flat", True, True),
    ],
)
def test_rename_switches_the_metric_generation(variant: str, generation: str, legacy: bool, flat: bool) -> None:
    sim, clock = manual(faults=(f"rename={variant}",))
    canary(sim, clock)
    text = sim.metrics_text()
    assert ("kv_offload_total_bytes_total" in text) == legacy
    assert ("kv_offload_load_bytes_total" in text) == flat
    samples = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert all(ln.startswith("vllm_" if variant == "underscores" else "vllm:") for ln in samples)
    snap = normalise(text)
    assert snap.generation == generation
    assert snap.engines[0].counters["offload_load_bytes"] == 682_622_976  # never double-counted


def test_slow_load_makes_cpu_tier_hits_slower() -> None:
    times = []
    for faults in ((), ("slow-load=20",)):
        sim, clock = manual(faults=faults)
        send(sim, clock, P)
        evict(sim, clock)
        plan = sim.engines[0].submit(SimRequest(P, max_tokens=1), clock())
        times.append((plan.queue_s, plan.external_hit))
    assert times[1][1] == times[0][1] == 5952
    assert times[1][0] > times[0][0] + 0.3  # 682 MB at 1.9 GB/s instead of 38 GB/s


def test_truncate_and_pad_helpers() -> None:
    text = "# HELP a x\n# TYPE a counter\na_total 1.0\nb_total 2.0\nc_total 3.0\n"
    cut = truncate(text)
    assert text.startswith(cut) and not cut.endswith("\n") and len(cut) < len(text)
    assert len(pad(text, 10_000)) >= 10_000 and pad(text, 10_000).endswith("\n")


# ---- over HTTP, through the exporter's own source ------------------------------------------------


@pytest.fixture
async def live(aiohttp_server: Any) -> Any:
    sim = Simulator(SimOptions(seed=5, time_scale=0.01))
    server = await aiohttp_server(make_app(sim))
    async with aiohttp.ClientSession() as session:
        yield sim, str(server.make_url("")).rstrip("/"), session


async def _faults(session: aiohttp.ClientSession, url: str, **body: Any) -> Any:
    async with session.post(url + "/_sim/faults", json=body) as resp:
        return resp.status, await resp.json()


@pytest.mark.parametrize(
    "fault,reason",
    [
        ("metrics-500", "http_status"),
        ("metrics-slow=2", "timeout"),
        ("metrics-truncated", "truncated"),
        ("metrics-huge=300000", "too_large"),
        ("down", "connect"),
    ],
)
async def test_metrics_faults_as_the_exporter_sees_them(live: Any, fault: str, reason: str) -> None:
    _, url, session = live
    assert await fetch_metrics(session, url, 2.0, 200_000)
    status, body = await _faults(session, url, add=[fault])
    assert status == 200 and body["active"] == [fault]
    with pytest.raises(ScrapeError) as err:
        await fetch_metrics(session, url, 0.3, 200_000)
    assert err.value.reason == reason
    status, body = await _faults(session, url, remove=[fault.partition("=")[0]])
    assert body["active"] == []
    assert "vllm:prefix_cache_hits_total" in await fetch_metrics(session, url, 2.0, 200_000)


async def test_down_drops_every_endpoint_but_admin(live: Any) -> None:
    _, url, session = live
    await _faults(session, url, add=["down"])
    for path in ("/health", "/v1/models"):
        with pytest.raises(aiohttp.ClientError):
            async with session.get(url + path) as resp:
                await resp.read()
    async with session.get(url + "/_sim/faults") as resp:
        assert (await resp.json())["active"] == ["down"]


@pytest.mark.parametrize("code", [400, 503])
async def test_completions_status_answers_every_completion_with_it(live: Any, code: int) -> None:
    _, url, session = live
    await _faults(session, url, add=[f"completions-status={code}"])
    body = {"model": "any", "prompt": [1, 2, 3], "max_tokens": 1}
    async with session.post(url + "/v1/completions", json=body) as resp:
        assert resp.status == code
        err = (await resp.json())["error"]
    assert err["code"] == code and str(code) in err["message"]
    async with session.get(url + "/health") as resp:  # only completions are refused
        assert resp.status == 200


async def test_admin_endpoint_rejects_bad_requests(live: Any) -> None:
    _, url, session = live
    assert (await _faults(session, url, add=["bogus"]))[0] == 400
    assert (await _faults(session, url, add="down"))[0] == 400
    async with session.post(url + "/_sim/faults", json={"oops": 1}) as resp:
        assert resp.status == 400
    async with session.get(url + "/_sim/faults") as resp:
        body = await resp.json()
    assert body["active"] == [] and set(body["available"]) == set(FAULTS)


def test_faults_given_at_start() -> None:
    sim, _ = manual(faults=("store-without-load", "slow-load=5", "metrics-500"))
    assert sim.engines[0].tier.forgetful and sim.engines[0].timing.slow_load == 5
    assert sorted(sim.faults.names()) == ["metrics-500", "slow-load=5", "store-without-load"]
    with pytest.raises(ValueError):
        Simulator(SimOptions(faults=("nope",)))
