"""Who may take one of the listener's connection slots: a handful of addresses must not be able to take
them all from Prometheus and the kubelet.

- Connections of one address whose request headers have not arrived yet (half-open, half-sent) are
  capped at a small absolute number, `MAX_PENDING_PER_CLIENT`: a slowloris from a few addresses holds a
  few dozen slots, not the listener. A trusted address (below) may have as many pending as it may have
  open (a quarter of the slots): a Prometheus opening many `/probe` connections at once is not refused.
- A reserve of the slots (`reserve`, an eighth) is kept for trusted addresses: those that were answered
  with a success before (authenticated, when basic auth is on), remembered in `GuardStats.trusted`.
  Everything else shares the rest, so fifty addresses filling it leave room for the scrapers seen before.
- Fair per address in the reserve: once the open connections reach the reserve, a trusted address is
  admitted only while it holds fewer connections than the mean of the addresses that hold any (one that
  holds none always qualifies). A few addresses answered once (any address is, without basic auth) that
  open a quarter of the slots each therefore fill the shared room but not the reserve: Prometheus and the
  kubelet, holding none, still get in.
- When even that is full, an address that holds no slot may still ask `/healthz`: a small lane
  (`HEALTHZ_LANE` connections, one per address, `HEALTHZ_TIMEOUT` to send its request line) answers it
  without aiohttp, or 503 for anything else. Only without basic auth and TLS (else `/healthz` needs them).
Every refusal is `connection_limit` in kvoffload_exporter_http_rejected_total.
"""

from __future__ import annotations

from enum import Enum

MAX_PENDING_PER_CLIENT = 8
"""Connections of one address still waiting for their request headers. Prometheus sends its headers in
the packet after the handshake, so its connections are pending for a moment at most."""

HEALTHZ_LANE = 16
HEALTHZ_TIMEOUT = 2.0
HEALTHZ_OK = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n"
BUSY = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"


class Admit(Enum):
    SLOT = "slot"  # an ordinary connection, handed to aiohttp
    HEALTHZ = "healthz"  # the overflow lane: `/healthz` answered, anything else 503
    REFUSE = "refuse"


class Slots:
    """The counts behind each decision: open connections per address, pending ones per address, the lane."""

    def __init__(self, max_connections: int) -> None:
        self.max = max_connections
        self.reserve = max(2, max_connections // 8)
        self.per_client = max(1, max_connections // 4)  # a trusted /probe-heavy Prometheus keeps its room
        self.open = 0
        self.per_peer: dict[str, int] = {}
        self.pending: dict[str, int] = {}
        self.lane: dict[str, int] = {}  # address -> its /healthz lane connection (0 or 1)

    def admit(self, peer: str, trusted: bool, lane_open: bool) -> Admit:
        room, pending = (self.max, self.per_client) if trusted else (self.max - self.reserve, MAX_PENDING_PER_CLIENT)
        if self.pending.get(peer, 0) >= pending or self.per_peer.get(peer, 0) >= self.per_client:
            return Admit.REFUSE
        if trusted and self.open >= self.max - self.reserve and not self._below_mean(peer):
            room = 0  # the reserve is for the addresses that hold the least, not for the biggest holders
        if self.open < room:
            self.open += 1
            self.per_peer[peer] = self.per_peer.get(peer, 0) + 1
            self.pending[peer] = self.pending.get(peer, 0) + 1
            return Admit.SLOT
        if lane_open and peer not in self.lane and len(self.lane) < HEALTHZ_LANE:
            self.lane[peer] = 1
            return Admit.HEALTHZ
        return Admit.REFUSE

    def _below_mean(self, peer: str) -> bool:
        held = self.per_peer.get(peer, 0)
        return held == 0 or held * len(self.per_peer) < self.open

    def headers_done(self, peer: str) -> None:
        _drop(self.pending, peer)

    def headers_started(self, peer: str) -> None:
        self.pending[peer] = self.pending.get(peer, 0) + 1

    def release(self, peer: str, pending: bool) -> None:
        self.open -= 1
        _drop(self.per_peer, peer)
        if pending:
            _drop(self.pending, peer)

    def release_lane(self, peer: str) -> None:
        self.lane.pop(peer, None)


def _drop(counts: dict[str, int], peer: str) -> None:
    left = counts.pop(peer, 1) - 1
    if left > 0:
        counts[peer] = left


def healthz_answer(head: bytes) -> bytes:
    """The lane's whole answer to a request line: `/healthz` (or `/-/healthy`) is ok, anything else busy."""
    method, _, rest = head.partition(b" ")
    path = rest.partition(b" ")[0]
    return HEALTHZ_OK if method == b"GET" and path in (b"/healthz", b"/-/healthy") else BUSY


__all__ = [
    "BUSY",
    "HEALTHZ_LANE",
    "HEALTHZ_OK",
    "HEALTHZ_TIMEOUT",
    "MAX_PENDING_PER_CLIENT",
    "Admit",
    "Slots",
    "healthz_answer",
]
