"""One vLLM target's poll: fetch, normalise (a large body in a worker thread), advance its totals,
derive, re-render.

`scheduler.Scheduler` schedules these; `probe` runs one for a `/probe` request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import replace

from kvoffload_exporter import redact
from kvoffload_exporter.config.settings import Config, TargetConfig
from kvoffload_exporter.derive import convoy, history
from kvoffload_exporter.derive import window as derive
from kvoffload_exporter.derive.reasons import CanaryFacts
from kvoffload_exporter.expose.collector import TargetView, target_fragment
from kvoffload_exporter.expose.render import Fragment, Heads
from kvoffload_exporter.ingest.backends import Origins
from kvoffload_exporter.ingest.bodies import join_sources
from kvoffload_exporter.ingest.exposition import ParseError
from kvoffload_exporter.ingest.linecache import LineCache
from kvoffload_exporter.ingest.normalise import normalise
from kvoffload_exporter.ingest.snapshot import EngineKey, Snapshot
from kvoffload_exporter.redact import Scrubber, origin, redact_url
from kvoffload_exporter.server.historyclock import HistoryClock
from kvoffload_exporter.server.logbudget import BOUNDS, LogBudget, clip, held_back
from kvoffload_exporter.sources.vllm_http import (
    BODY_BUDGET,
    Auth,
    Client,
    Reservation,
    ScrapeError,
    fetch_metrics,
    fetch_url,
    fetch_version,
)

log = logging.getLogger("kvoffload.poller")

Parsed = tuple[Snapshot, derive.Point, dict[EngineKey, derive.EngineDerived]]

INLINE_PARSE_BYTES = 256 * 1024
"""Bodies up to this size are parsed on the event loop. Why: a real vLLM body (~70 KB) parses in under
a millisecond, less than the hop to a worker thread and back costs (at 1,000 targets that hop was ~12 %
of the exporter's CPU); the parse holds the GIL either way. A larger body, hostile or a many-engine
server, goes to a worker thread, so the loop (and `/healthz`) gets its 5 ms turns while it is read."""


CHURN_FACTOR = 2
CHURN_SLACK = 2
"""A target's history holds at most CHURN_FACTOR × its engines now + CHURN_SLACK distinct (model_name,
engine) keys, and never more than CHURN_FACTOR × `engine_limit`: room for every engine to be replaced
once within the window (a model renamed, engines scaled), not for a new key on every poll (each one a
packed layout of its own, its label values with it; a point without today's keys is no window start)."""


STALE_POLLS = 3.0
"""A target whose last poll finished more than this many poll intervals ago (and more than one interval
plus the poll timeout: a poll may take its whole timeout) is served as `up 0`, reason `stale`, until a
poll finishes again. Why: `/metrics` and `/probe` serve kept state, and a loop that stopped polling
(saturated slots, a removed target) must not look like live data to Prometheus."""


class TargetPoller:
    """One vLLM target: poll → normalise → advance totals → derive over the window → its fragment."""

    def __init__(
        self,
        cfg: TargetConfig,
        config: Config,
        clock: Callable[[], float] = time.time,
        timer: Callable[[], float] = time.monotonic,
        logs: LogBudget | None = None,
    ):
        self.cfg = cfg
        self.config = config
        self.clock = clock
        self.timer = timer
        self.history: deque[derive.Mark] = deque(maxlen=config.history_len)  # newest whole, older packed
        self.view = TargetView(label=cfg.label, url=cfg.url, tier_bytes=cfg.tier_bytes, pending=True)
        self.errors: dict[str, int] = {}
        self._failing: tuple[int, str] = (0, "")  # polls failed in a row since the last success, last reason
        self.polls = 0
        self.last_poll: float | None = None  # timer() at the end of the last poll
        self._heads: Heads = {}  # this target's formatted series names, reused every poll
        self.fragment: Fragment = target_fragment(self.view, config.window_label, self._heads)
        self._version_checked = 0.0
        self.logs = logs or LogBudget(timer=timer)  # one WARNING per failure kind per interval
        self._keys: frozenset[EngineKey] | None = None  # the engines of the last good poll
        self._held: Counter[EngineKey] = Counter()  # engine key -> points of `history` holding it
        self.extra_errors: dict[str, int] | None = {} if cfg.extra_metrics_urls else None
        self.canary: CanaryFacts | None = None  # from a plugin (ExporterHost.report_facts): refines the reasons
        self._lines = LineCache()  # the series this target sent before, read with one lookup each
        self._scrub: tuple[int, Scrubber | None] = (-1, None)
        self.scrub  # noqa: B018  # built now: its credentials are known to every exit before the first poll
        self._polled: asyncio.Event | None = None  # made when a /probe first waits (`polled`)
        self._history_time = HistoryClock()  # the wall clock, never stepping back or a day forward

    @property
    def polled(self) -> asyncio.Event:
        """Set once the first poll finished (a /probe of a new target waits on it). Made when first asked
        for: a target polled on its schedule never needs it (an Event and its deque, 0.8 KiB a target)."""
        if self._polled is None:
            self._polled = asyncio.Event()
            if self.polls:
                self._polled.set()
        return self._polled

    @property
    def scrub(self) -> Scrubber | None:
        """Its own credentials and the process's shared secrets (the canary's API key), removed from
        whatever it answers; rebuilt when a shared secret became known after this poller was made."""
        if self._scrub[0] != redact.generation():
            self._scrub = (redact.generation(), self.cfg.scrubber() or None)
        return self._scrub[1]

    def _version_warning(self, reason: str, detail: str) -> None:
        """A `/version` redirect to another origin: one line per interval (the log budget), scrubbed."""
        detail = clip(self.scrub(detail) if self.scrub is not None else detail)
        let, before = self.logs.allow(("version", reason))
        if let:
            url = redact_url(self.cfg.url) + "/version"
            fields = {"target": self.cfg.label, "reason": reason, "url": url, "error": detail}
            msg = "target %s (%s): %s: %s%s"
            log.warning(msg, self.cfg.label, url, reason, detail, held_back(before), extra=fields)

    def _parse(self, text: str, now: float, origins: Origins | None = None) -> Parsed:
        """CPU-bound part of a poll; a large body's runs in a worker thread (INLINE_PARSE_BYTES)."""
        try:  # capped by the limits: a hostile body costs bounded time and memory
            snapshot = normalise(text, self.cfg.limits or self.config.limits, self._lines, self.scrub, origins)
        except ParseError as e:
            raise ScrapeError(e.reason, str(e)) from e
        if not snapshot.families:
            raise ScrapeError("parse", "no vllm: metrics in the body")
        prev = self.history[-1] if self.history else None
        point = derive.advance(prev, snapshot, now)
        return snapshot, point, derive.derive([*self.history, point], now, self.config.window)

    def _parse_all(self, text: str, extras: list[str | None], now: float) -> tuple[Parsed, ScrapeError | None]:
        """vLLM's body joined with the extra ones (as `inspect a+b`; None: that fetch failed, its series are
        missing and the state unknown); if only the join fails to parse, vLLM's body alone, with the extra
        endpoints' error: their bad body never takes the target down."""
        if any(b is not None for b in extras):
            joined, origins = join_sources(text, extras)
            try:
                return self._parse(joined, now, origins), None
            except ScrapeError as e:
                return self._parse(text, now), e
        return self._parse(text, now), None

    async def _fetch(
        self, session: Client, now: float, version: str | None, hold: Reservation
    ) -> tuple[str, list[str | None], str | None]:
        if version is None or now - self._version_checked > 300:  # /version can change on upgrade
            auth, warn = self.cfg.source_auth(), self._version_warning
            version = await fetch_version(session, self.cfg.url, self.config.timeout, auth, warn) or version
            if version is not None and redact.known()(version) != version:
                version = None  # a secret echoed as a version: `unknown`, never exported
            self._version_checked = now
        auth = self.cfg.source_auth()
        main = fetch_metrics(session, self.cfg.url, self.config.timeout, self.config.max_body_bytes, auth, hold)
        if not self.cfg.extra_metrics_urls:
            return await main, [], version
        urls = self.cfg.extra_metrics_urls
        extras = [asyncio.ensure_future(self._fetch_extra(session, i, u, hold)) for i, u in enumerate(urls)]
        try:  # concurrent with vLLM's; a failed vLLM fetch (the target is down) cancels them
            text = await main
        except BaseException:
            for t in extras:
                t.cancel()
            raise
        bodies = await asyncio.gather(*extras)  # never raise: a failure is counted and gives None
        return text, list(bodies), version

    def _extra_auth(self, i: int, url: str) -> Auth:
        """The URL's own userinfo, else the target's credentials only where the origin is the target's."""
        own = self.cfg.extra_auth[i] if i < len(self.cfg.extra_auth) else None
        if own is not None:
            return own
        return self.cfg.source_auth() if origin(url) == origin(self.cfg.url) else None

    async def _fetch_extra(self, session: Client, i: int, url: str, hold: Reservation) -> str | None:
        """One extra endpoint's body, or None: its failure is counted and logged, never the target's."""
        try:
            text = await fetch_url(
                session, url, self.config.timeout, self.config.max_body_bytes, self._extra_auth(i, url), hold
            )
        except ScrapeError as e:
            self._extra_failed(url, e)
            return None
        except Exception as e:  # a bug: counted like the target's own, never stops the poll
            if self.logs.allow(("traceback", url))[0]:
                log.exception("target %s: unexpected error while fetching an extra endpoint", self.cfg.label)
            self._extra_failed(url, ScrapeError("internal", f"{type(e).__name__}: {e}"))
            return None
        return text

    def _cleaned(self, e: ScrapeError) -> ScrapeError:
        """`e` with the target's credentials removed from its detail (an error body or a quoted line that
        echoes them): what is logged and kept."""
        if self.scrub is None:
            return e
        return ScrapeError(e.reason, self.scrub(e.detail))

    def _extra_failed(self, url: str, e: ScrapeError, shown: str | None = None) -> None:
        e = self._cleaned(e)
        if self.extra_errors is None:  # the config changed under a running poller: nothing to count into
            return
        self.extra_errors[e.reason] = self.extra_errors.get(e.reason, 0) + 1
        let, before = self.logs.allow((url, e.reason))  # once per failure kind and interval, not every poll
        if let:
            where, detail = shown or redact_url(url), clip(e.detail)
            fields = {"target": self.cfg.label, "reason": e.reason, "url": url or None, "error": detail}
            msg = "target %s extra endpoint %s: %s: %s%s"
            log.warning(msg, self.cfg.label, where, e.reason, detail, held_back(before), extra=fields)

    def reconfigure(self, config: Config) -> None:
        """A reload's configuration, from the next poll on: the history resized for its window and interval,
        and the engines it holds counted again for the churn budget."""
        self.config = config
        self.history = deque(self.history, maxlen=config.history_len)
        self._held = Counter(k for m in self.history for k in m.totals)

    async def poll_once(self, session: Client) -> float:
        """Poll and rebuild this target's fragment; returns the poll's duration in seconds. `session`: the
        exporter's PollClient (kept-alive connections), or an aiohttp session (one PollClient per fetch)."""
        started = self.timer()
        wall = self.clock()
        now = self._history_time(wall, started)
        version = self.view.version
        hold = BODY_BUDGET.reserve()  # the bodies count against the process budget until parsed
        try:
            try:
                text, extras, version = await self._fetch(session, now, version, hold)
                if len(text) + sum(len(b) for b in extras if b is not None) <= INLINE_PARSE_BYTES:
                    parsed, join_error = self._parse_all(text, extras, now)
                else:
                    parsed, join_error = await asyncio.to_thread(self._parse_all, text, extras, now)
            except ScrapeError:
                raise
            except Exception as e:  # a bug must never stop polling or leave `up` stale
                if self.logs.allow("traceback")[0]:
                    log.exception("target %s: unexpected error while polling", self.cfg.label)
                raise ScrapeError("internal", f"{type(e).__name__}: {e}") from e
        except ScrapeError as e:
            self._failed(e, version, started)
            return self.timer() - started
        finally:
            hold.release()
            self.polls += 1
            self.last_poll = self.timer()
            if self._polled is not None:
                self._polled.set()
        if join_error is not None:
            self._extra_failed("", join_error, "bodies (read with vLLM's)")
        self._succeeded(parsed, len(text), version, now, started, wall)
        return self.timer() - started

    def _succeeded(
        self, parsed: Parsed, size: int, version: str | None, now: float, started: float, wall: float | None = None
    ) -> None:
        snapshot, point, derived = parsed
        self._push(point)
        self._say_what_changed(snapshot)
        self._set_view(
            TargetView(
                label=self.cfg.label,
                url=self.cfg.url,
                up=True,
                errors=dict(self.errors),
                duration=self.timer() - started,
                body_bytes=size,
                last_success=now if wall is None else wall,  # the wall clock: Prometheus compares time()
                version=version,
                snapshot=snapshot,
                derived=derived,
                tier_bytes=self.cfg.tier_bytes,
                convoy=convoy.derive(self.history, now, self.config.window),
                canary=self.canary,
                extra_errors=self._extra_errors(),
            )
        )

    def _say_what_changed(self, snapshot: Snapshot) -> None:
        """One INFO line when the target answers again after failing, and one per engine whose counters went
        back (a restart: the windows treat it as one, never as a negative delta)."""
        failed, reason = self._failing
        if failed:
            fields = {"target": self.cfg.label, "failed_polls": failed, "reason": reason}
            log.info(
                "target %s recovered after %d failed poll(s) (last: %s)", self.cfg.label, failed, reason, extra=fields
            )
            self._failing = (0, "")
        before = self.view.snapshot
        if before is None:
            return
        last = {e.key: e.counters for e in before.engines}
        for e in snapshot.engines:
            old = last.get(e.key)
            if old and any(v < old[k] for k, v in e.counters.items() if k in old):
                let, held = self.logs.allow("engine_restarted")  # a target may restart every poll
                if not let:
                    continue
                model, engine = e.key
                fields = {"target": self.cfg.label, "model_name": model, "engine": engine}
                log.info(
                    "target %s: engine %s/%s restarted (its counters went back)%s",
                    self.cfg.label,
                    clip(model),
                    clip(engine),
                    held_back(held),
                    extra=fields,
                )

    def _push(self, point: derive.Point) -> None:
        """Into the history (the point it supersedes is packed: ~13 → ~0.6 KiB), within the target's
        budget of engine keys: label values that change every poll (a new `model_name` each time) drop the
        oldest points instead of growing memory, counted as label churn."""
        keys = frozenset(point.totals)
        if keys != self._keys:  # an engine came or went: the formatted series of the others are garbage
            self._heads.clear()
            self._keys = keys
        limits = self.cfg.limits or self.config.limits
        budget = min(CHURN_FACTOR * limits.engine_limit, CHURN_FACTOR * len(keys) + CHURN_SLACK)
        dropped = history.push(self.history, point, self._held, budget)
        if dropped:
            BOUNDS.label_churn += dropped
            let, before = self.logs.allow("label_churn")
            if let:
                fields = {"target": self.cfg.label, "reason": "label_churn"}
                msg = "target %s: label values change every poll; %d history point(s) dropped%s"
                log.warning(msg, self.cfg.label, dropped, held_back(before), extra=fields)

    def ingest(self, text: str, now: float, version: str | None = None) -> None:
        """A poll's work on a body already fetched, synchronously: what `poll_once` does between the
        fetch and its return (normalise, advance, derive, the fragment), without the poll counters.
        `bench/pipeline.py` times exactly this against prometheus_client's parser."""
        started = self.timer()
        parsed, _ = self._parse_all(text, [], now)
        self._succeeded(parsed, len(text), version, now, started)

    def _extra_errors(self) -> dict[str, int] | None:
        return None if self.extra_errors is None else dict(self.extra_errors)

    def _failed(self, e: ScrapeError, version: str | None, started: float) -> None:
        e = self._cleaned(e)
        self.errors[e.reason] = self.errors.get(e.reason, 0) + 1
        self._failing = (self._failing[0] + 1, e.reason)
        let, before = self.logs.allow(e.reason)  # one line per failure kind and interval, the detail cut
        if let:
            url, detail = redact_url(self.cfg.url) + "/metrics", clip(e.detail)
            fields = {"target": self.cfg.label, "reason": e.reason, "url": url, "error": detail}
            msg = "target %s (%s): %s: %s%s"
            log.warning(msg, self.cfg.label, url, e.reason, detail, held_back(before), extra=fields)
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
                extra_errors=self._extra_errors(),
            )
        )

    def stale_after(self) -> float:
        """Seconds after its last poll at which kept data stops being served as live (STALE_POLLS)."""
        interval = self.config.poll_interval
        return max(STALE_POLLS * interval, interval + self.config.timeout)

    def mark_stale(self) -> bool:
        """`up 0`, reason `stale`, when the last poll is older than `stale_after()`; True if it just went
        stale (counted once in kvoffload_scrape_errors_total). The next poll that succeeds brings it back."""
        if not self.view.up or self.last_poll is None:
            return False
        age = self.timer() - self.last_poll
        if age <= self.stale_after():
            return False
        self.errors["stale"] = self.errors.get("stale", 0) + 1
        fields = {"target": self.cfg.label, "reason": "stale", "age_seconds": round(age, 3)}
        log.warning("target %s: no poll finished for %.1f s; served as down (stale)", self.cfg.label, age, extra=fields)
        self._set_view(replace(self.view, up=False, errors=dict(self.errors), last_error="stale"))
        return True

    def _set_view(self, view: TargetView) -> None:
        self.view = view
        self.fragment = target_fragment(view, self.config.window_label, self._heads)
