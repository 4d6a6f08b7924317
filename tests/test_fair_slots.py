"""Hardening, fourth pass (issue 44): connection and password-check slots are fair per source address.

A few addresses answered once (any address is, without basic auth) must not hold every connection slot,
and a wrong-password flood from many addresses right after a reload (both caches empty) must not hold
every password-check place: Prometheus, answered before, still gets through."""

from __future__ import annotations

import asyncio
import threading

import bcrypt
import pytest

from kvoffload_exporter.server.connslots import Admit, Slots
from kvoffload_exporter.server.webauth import AuthGate


def _fill(slots: Slots, peers: list[str]) -> dict[str, int]:
    """Each peer opens connections in turn (headers sent at once) until every one is refused."""
    held = dict.fromkeys(peers, 0)
    progress = True
    while progress:
        progress = False
        for p in peers:
            if slots.admit(p, trusted=True, lane_open=False) is Admit.SLOT:
                slots.headers_done(p)
                held[p] += 1
                progress = True
    return held


@pytest.mark.parametrize("attackers", [4, 24])
def test_addresses_answered_once_cannot_take_the_reserve_from_prometheus(attackers: int) -> None:
    slots = Slots(256)
    held = _fill(slots, [f"10.0.0.{i}" for i in range(attackers)])
    assert sum(held.values()) < 256, held  # the last slots stay for addresses holding the fewest
    assert slots.admit("prometheus", trusted=True, lane_open=False) is Admit.SLOT
    assert slots.admit("kubelet", trusted=True, lane_open=False) is Admit.SLOT


def test_one_address_still_gets_its_quarter_when_nobody_else_is_there() -> None:
    slots = Slots(256)
    assert _fill(slots, ["prometheus"]) == {"prometheus": 64}


async def test_a_wrong_password_flood_after_a_reload_leaves_prometheus_a_check() -> None:
    good = bcrypt.hashpw(b"right-password", bcrypt.gensalt(4))
    gate = AuthGate({"prometheus": good}, max_pending=8)
    release = threading.Event()
    checked = gate._check

    def slow(*a: object) -> bool:
        release.wait(30)  # the flood's checks hold the bcrypt thread until the test lets them go
        return checked(*a)  # type: ignore[arg-type]

    try:
        assert await gate.verify("prometheus-addr", "prometheus", "right-password") is True
        gate.replace({"prometheus": good})  # SIGHUP: both caches forgotten
        gate._check = slow  # type: ignore[method-assign]
        flood = [asyncio.ensure_future(gate.verify(f"10.1.0.{i}", "prometheus", f"guess-{i}")) for i in range(60)]
        await asyncio.sleep(0)
        busy = sum(1 for f in flood if f.done() and f.result() is None)
        assert busy >= 60 - 8  # the flood is refused past its places (429)
        scrape = asyncio.ensure_future(gate.verify("prometheus-addr", "prometheus", "right-password"))
        await asyncio.sleep(0)
        assert not scrape.done() or scrape.result() is not None, "Prometheus got 429 (auth_busy)"
        release.set()
        assert await scrape is True
        await asyncio.gather(*flood)
    finally:
        release.set()
        gate.close()


async def test_a_web_config_password_once_proven_is_scrubbed_from_every_log_line() -> None:
    from kvoffload_exporter.redact import scrub

    gate = AuthGate({"prometheus": bcrypt.hashpw(b"web-password-44", bcrypt.gensalt(4))})
    try:
        assert await gate.verify("p", "prometheus", "web-password-44") is True
    finally:
        gate.close()
    assert scrub("said WEB-PASSWORD-44") == "said <redacted>"
