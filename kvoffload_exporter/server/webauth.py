"""Basic auth that leaks nothing and cannot be starved: the checks behind `basic_auth_users`.

- **Constant work for unknown users.** A name that is not configured is checked against a dummy hash
  of the configured cost, so the answer takes as long as a wrong password would: timing does not tell
  which user names exist (with mixed costs, the dummy takes the highest).
- **A bounded pool.** bcrypt runs in one dedicated thread (never the loop, never the shared pool that
  parses targets); at most `max_pending` checks wait for it, and at most one per client address. Past
  that the answer is 429 at once (`auth_busy`), so a wrong-password flood costs one core at most and a
  client on another address gets the next check, not the end of a queue. A quarter of the places
  (`max_pending // 4`, at least one) are kept for addresses that passed a check before (the last 1,024,
  remembered across reloads): a wrong-password flood from many addresses right after a reload (both
  caches empty) leaves Prometheus a place to prove its password again.
- **Caches.** A verified (user, password) pair is remembered by its SHA-256 (LRU, 256 pairs), so a
  scraper pays bcrypt once, not every scrape; a failed pair is remembered too (LRU, 1,024), so one wrong
  password repeated costs one check.
- **Reload.** `replace(users)` swaps the users and forgets both caches (SIGHUP).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from kvoffload_exporter import redact
from kvoffload_exporter.enums import HttpRejectReason
from kvoffload_exporter.server.guards import GuardStats

if TYPE_CHECKING:
    from kvoffload_exporter.config.webconfig import WebConfig
    from kvoffload_exporter.server.listener import GuardedSite

log = logging.getLogger("kvoffload")

_OK_CACHE = 256
_FAILED_CACHE = 1024
_PASSED = 1024
_UNAUTHORIZED = {"WWW-Authenticate": 'Basic realm="kvoffload-exporter"'}


def _credentials(header: str) -> tuple[str, str] | None:
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "basic" or len(token) > 4096:
        return None
    try:
        user, sep, password = base64.b64decode(token.strip(), validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if sep else None


def _cost(h: bytes) -> int:
    return int(h[4:6])


def dummy_hash(users: Mapping[str, bytes]) -> bytes:
    """A hash of the highest configured cost, made now (one bcrypt round at start and on reload)."""
    import bcrypt

    cost = max((_cost(h) for h in users.values()), default=10)
    return bcrypt.hashpw(b"no user has this password", bcrypt.gensalt(rounds=cost))


class AuthGate:
    """The middleware's state: users, caches, the one bcrypt thread and who is waiting for it."""

    def __init__(self, users: Mapping[str, bytes], guards: GuardStats | None = None, max_pending: int = 8) -> None:
        self.guards = guards or GuardStats()
        self.max_pending = max_pending
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bcrypt")
        self._pending: dict[str, int] = {}  # peer -> checks waiting or running (0 or 1)
        self._passed: OrderedDict[str, None] = OrderedDict()  # addresses that passed a check (LRU), kept on reload
        self.reserve = min(max_pending - 1, max(1, max_pending // 4))
        self.replace(users)

    def replace(self, users: Mapping[str, bytes], dummy: bytes | None = None) -> None:
        self.users = dict(users)
        self._dummy = dummy or (dummy_hash(self.users) if self.users else b"")
        self._ok: OrderedDict[tuple[str, bytes], None] = OrderedDict()
        self._failed: OrderedDict[tuple[str, bytes], None] = OrderedDict()

    def _check(self, users: Mapping[str, bytes], dummy: bytes, user: str, password: str) -> bool:
        import bcrypt

        h = users.get(user)
        try:
            ok = bcrypt.checkpw(password.encode(), h or dummy)  # the same work for a name that does not exist
        except ValueError:
            ok = False
        return ok and h is not None

    async def verify(self, peer: str, user: str, password: str) -> bool | None:
        """True/False, or None when the pool is full (the caller answers 429 without checking)."""
        key = (user, hashlib.sha256(f"{user}\0{password}".encode()).digest())
        if key in self._ok:
            self._ok.move_to_end(key)
            return True
        if key in self._failed:
            return False
        room = self.max_pending if peer in self._passed else self.max_pending - self.reserve
        if self._pending.get(peer) or sum(self._pending.values()) >= room:
            return None
        self._pending[peer] = 1
        users, dummy = self.users, self._dummy
        try:
            ok = await asyncio.get_running_loop().run_in_executor(self._pool, self._check, users, dummy, user, password)
        finally:
            del self._pending[peer]
        if users is not self.users:  # replaced while checking: the answer is for the old users
            return False
        if ok:
            redact.register(password)  # a web-config password, known now: every log line and report drops it
            self._passed[peer] = None
            self._passed.move_to_end(peer)
            if len(self._passed) > _PASSED:
                self._passed.popitem(last=False)
        cache = self._ok if ok else self._failed
        cache[key] = None
        if len(cache) > (_OK_CACHE if ok else _FAILED_CACHE):
            cache.popitem(last=False)
        return ok

    @property
    def middleware(self) -> Middleware:
        @web.middleware
        async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
            if not self.users:  # a web config without users (reload may add them)
                return await handler(request)
            cred = _credentials(request.headers.get("Authorization", ""))
            if cred is not None:
                ok = await self.verify(request.remote or "", *cred)
                if ok:
                    return await handler(request)
                if ok is None:
                    self.guards.reject(HttpRejectReason.AUTH_BUSY)
                    return web.Response(status=429, text="Too many password checks\n", headers={"Retry-After": "1"})
            self.guards.reject(HttpRejectReason.UNAUTHORIZED)
            return web.Response(status=401, text="Unauthorized\n", headers=_UNAUTHORIZED)

        return middleware

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class WebReload:
    """SIGHUP for `--web.config.file`: the file is read in the reload thread (with its dummy hash), the
    users swapped on the loop; a new certificate applies to new connections. Turning TLS on or off
    needs a restart, and the log says so; an invalid file keeps the running one, and the log says so."""

    def __init__(self, path: str | None, current: WebConfig | None, gate: AuthGate | None, site: GuardedSite) -> None:
        self.path, self.current, self.gate, self.site = path, current, gate, site

    def parse(self) -> tuple[WebConfig, bytes] | Exception | None:
        from kvoffload_exporter.config.webconfig import WebConfigError, load

        if not self.path:
            return None
        try:
            new = load(self.path)
            return new, dummy_hash(new.users) if new.users else b""
        except (WebConfigError, OSError, ValueError) as e:
            return e

    def apply(self, parsed: tuple[WebConfig, bytes] | Exception | None) -> bool | None:
        """True when the new file applies, False when it was refused (the running one is kept: the reload
        reports failure in its HTTP answer and metric), None without a web config."""
        if parsed is None:
            return None
        if isinstance(parsed, Exception):
            log.error("web config reload failed, keeping the running one: %s", parsed)
            return False
        new, dummy = parsed
        if self.gate is not None:
            self.gate.replace(new.users, dummy)
        tls = ""
        if (new.ssl_context is None) != (self.site.tls is None):
            tls = "; turning TLS on or off takes a restart: still " + ("on" if self.site.tls else "off")
            log.warning("web config reload: TLS was not changed (it takes a restart)")
        elif new.ssl_context is not None:
            self.site.tls = new.ssl_context  # certificate, key, client CA: for new connections
            tls = "; TLS settings reloaded for new connections"
        self.current = new
        log.info("web config reloaded: %d basic-auth user(s)%s", len(new.users), tls)
        return True


__all__ = ["AuthGate", "WebReload", "dummy_hash"]
