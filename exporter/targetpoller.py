"""One vLLM target's poll: fetch, normalise in a worker thread, advance its totals, derive, re-render.

`poller.Exporter` schedules these; `probe` runs one for a `/probe` request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable

import aiohttp

from exporter import convoy, derive
from exporter.collector import TargetView, target_fragment
from exporter.config import Config, TargetConfig
from exporter.exposition import ParseError
from exporter.model import EngineKey, Snapshot
from exporter.normalise import normalise
from exporter.reasons import CanaryFacts
from exporter.redact import redact_url
from exporter.render import Fragment, Heads
from exporter.sources.vllm_http import ScrapeError, fetch_metrics, fetch_version

log = logging.getLogger("kvoffload.poller")

Parsed = tuple[Snapshot, derive.Point, dict[EngineKey, derive.EngineDerived]]


class TargetPoller:
    """One vLLM target: poll → normalise → advance totals → derive over the window → its fragment."""

    def __init__(
        self,
        cfg: TargetConfig,
        config: Config,
        clock: Callable[[], float] = time.time,
        timer: Callable[[], float] = time.monotonic,
    ):
        self.cfg = cfg
        self.config = config
        self.clock = clock
        self.timer = timer
        self.history: deque[derive.Point] = deque(maxlen=config.history_len)
        self.view = TargetView(label=cfg.label, url=cfg.url, tier_bytes=cfg.tier_bytes)
        self.errors: dict[str, int] = {}
        self.polls = 0
        self.last_poll: float | None = None  # timer() at the end of the last poll
        self._heads: Heads = {}  # this target's formatted series names, reused every poll
        self.fragment: Fragment = target_fragment(self.view, config.window_label, self._heads)
        self._version_checked = 0.0
        self._last_error_logged: str | None = None
        self.canary: CanaryFacts | None = None  # from a plugin (Exporter.report_facts): refines the reasons

    def _parse(self, text: str, now: float) -> Parsed:
        """CPU-bound part of a poll; runs in a worker thread."""
        try:  # capped by the limits: a hostile body costs bounded time and memory
            snapshot = normalise(text, self.cfg.limits or self.config.limits)
        except ParseError as e:
            raise ScrapeError(e.reason, str(e)) from e
        if not snapshot.families:
            raise ScrapeError("parse", "no vllm: metrics in the body")
        prev = self.history[-1] if self.history else None
        point = derive.advance(prev, snapshot, now)
        return snapshot, point, derive.derive([*self.history, point], now, self.config.window)

    async def _fetch(self, session: aiohttp.ClientSession, now: float, version: str | None) -> tuple[str, str | None]:
        if version is None or now - self._version_checked > 300:  # /version can change on upgrade
            version = await fetch_version(session, self.cfg.url, self.config.timeout, self.cfg.source_auth()) or version
            self._version_checked = now
        auth = self.cfg.source_auth()
        return await fetch_metrics(
            session, self.cfg.url, self.config.timeout, self.config.max_body_bytes, auth
        ), version

    async def poll_once(self, session: aiohttp.ClientSession) -> float:
        """Poll and rebuild this target's fragment; returns the poll's duration in seconds."""
        started = self.timer()
        now = self.clock()
        version = self.view.version
        try:
            try:
                text, version = await self._fetch(session, now, version)
                snapshot, point, derived = await asyncio.to_thread(self._parse, text, now)
            except ScrapeError:
                raise
            except Exception as e:  # a bug must never stop polling or leave `up` stale
                log.exception("target %s: unexpected error while polling", self.cfg.label)
                raise ScrapeError("internal", f"{type(e).__name__}: {e}") from e
        except ScrapeError as e:
            self._failed(e, version, started)
            return self.timer() - started
        finally:
            self.polls += 1
            self.last_poll = self.timer()
        self._last_error_logged = None
        self.history.append(point)
        self._set_view(
            TargetView(
                label=self.cfg.label,
                url=self.cfg.url,
                up=True,
                errors=dict(self.errors),
                duration=self.timer() - started,
                body_bytes=len(text),
                last_success=now,
                version=version,
                snapshot=snapshot,
                derived=derived,
                tier_bytes=self.cfg.tier_bytes,
                convoy=convoy.derive(self.history, now, self.config.window),
                canary=self.canary,
            )
        )
        return self.timer() - started

    def _failed(self, e: ScrapeError, version: str | None, started: float) -> None:
        self.errors[e.reason] = self.errors.get(e.reason, 0) + 1
        if e.detail != self._last_error_logged:  # log a failure once, not every poll
            log.warning("target %s (%s/metrics): %s", self.cfg.label, redact_url(self.cfg.url), e)
            self._last_error_logged = e.detail
        self._set_view(
            TargetView(
                label=self.cfg.label,
                url=self.cfg.url,
                up=False,
                errors=dict(self.errors),
                duration=self.timer() - started,
                last_success=self.view.last_success,
                version=version,
                tier_bytes=self.cfg.tier_bytes,
                last_error=e.reason,
            )
        )

    def _set_view(self, view: TargetView) -> None:
        self.view = view
        if len(self._heads) > 20_000:  # labels churn (model renamed, engines come and go): start over
            self._heads.clear()
        self.fragment = target_fragment(view, self.config.window_label, self._heads)
