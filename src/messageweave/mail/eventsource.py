"""JMAP push through EventSource (RFC 8620 §7.3; issue #22): new mail within about a second,
with no public URL and no PushSubscription.

Every instance runs `run_eventsource`; one at a time holds `lock:jmap-eventsource`
(`store.receivers.hold`) and keeps one connection to the session's `eventSourceUrl`, expanded
with `types=Email`, `closeafter=no` and `ping=PING_S`, authenticated and trusted like the JMAP
client (it is the JMAP client's own connection pool; the URL must be on the session's origin).

- Right after a (re)connect the holder asks for a catch-up pass, so mail that arrived while
  it was away does not wait for the periodic one (the server sends no state on connect); at
  most one per `RECONNECT_CATCHUP_S`: one asked inside it is owed to the interval's end
  (`ReconnectCatchups`).
- Each `state` event that names our account's `Email` (or `EmailDelivery`) asks for one
  exactly as a StateChange does (`store.mailbox.request_catchup` + `announce_catchup`): many
  events, one pending pass. The reconcile stays the truth; an event is only a hint.
- Two pings missed (`2 × PING_S + 5` s of silence), the stream closed, or a line or an event
  over its cap (`mail.jmap.eventsource.MAX_LINE_BYTES`): reconnect after a jittered backoff
  (`BACKOFF_BASE_S` doubling to `BACKOFF_CAP_S`). Only a connection that brought a ping or an
  event resets it: a server that accepts and closes at once is backed off (issue #32).

`push_mode` (`auto`, `eventsource`, `subscription`, `off`) decides whether it runs;
`in_force` says which push delivers mail now (`/ready`, `diagnose`, `/metrics`, the page), from
the holder's status (`push:eventsource:status`) and the PushSubscription lifecycle; for an IMAP
wire `read_in_force` answers with the IDLE holder's (`mail.imap.idle`), and this holder stands
down (a switch of source on hot reload hands over between the two).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from redis.exceptions import RedisError

from messageweave.aio import cancel, jittered_backoff, raise_if_cancelling
from messageweave.config.live import NotConfigured
from messageweave.config.model import BusinessConfig
from messageweave.logs import RepeatLog
from messageweave.mail import push_lifecycle
from messageweave.mail.context import MailContext
from messageweave.mail.jmap import JmapAuthError, JmapClient, JmapError, JmapProtocolError
from messageweave.mail.jmap.eventsource import Event, state_change
from messageweave.store import keys, mailbox
from messageweave.store.receivers import (
    LoopStatus,
    eventsource_lock,
    hold,
    read_status,
    write_status,
)
from messageweave.store.redis import Redis

log = logging.getLogger(__name__)

PING_S = 30
TYPES = ("Email",)
CATCHUP_TYPES = frozenset({"Email", "EmailDelivery"})
RENEWALS_PER_LEASE = 3  # the lease is renewed this many times per its TTL
RECONNECT_CATCHUP_S = 10.0
BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 60.0
REFUSED_BASE_S = 30.0  # refused credentials or no event stream: a fix needs a person
UNAVAILABLE_RECHECK_S = 60.0  # the session offers no EventSource: look again this often
IDLE_S = 1.0
PLACE = "jmap eventsource"
WANTS_EVENTSOURCE = ("auto", "eventsource")

# state code → the words after `degraded: ` (`connected` is ok, `unavailable` is the server's).
REASONS = {
    "connecting": "EventSource connecting",
    "failing": "EventSource connection lost, reconnecting",
    "refused": "the mail server refused the credentials for EventSource",
    "not_event_stream": "the mail server's EventSource does not answer with an event stream",
    "unavailable": "the mail server offers no EventSource",
    "bad_url": "the session's eventSourceUrl is not on the session's origin",
}


@dataclass(frozen=True)
class PushInForce:
    """Which push brings mail now: `state` ok / degraded / off, `way` eventsource or
    subscription (None when off), the reason while degraded, and the last event's time."""

    state: push_lifecycle.PushState
    way: Literal["eventsource", "subscription", "idle"] | None = None
    reason: str | None = None
    last_event: int | None = None
    subscription: push_lifecycle.PushHealth | None = None

    @property
    def label(self) -> str:
        if self.state == "ok":
            return f"ok ({self.way})"
        if self.state == "degraded":
            return f"degraded: {self.reason}"
        return "off"


def in_force(cfg: BusinessConfig | None, es: LoopStatus | None,
             sub: push_lifecycle.PushHealth) -> PushInForce:
    """Combine the EventSource holder's status and the subscription's health under
    `push_mode`. A live EventSource wins; a healthy subscription next; else the first one
    `push_mode` wants says why it is degraded, or push is off."""
    mode = cfg.push_mode if cfg is not None else "auto"
    if cfg is None or mode == "off":
        return PushInForce("off", subscription=sub)
    es_wanted = mode in WANTS_EVENTSOURCE
    if es_wanted and es is not None and es.state == "connected":
        return PushInForce("ok", "eventsource", last_event=es.last_event, subscription=sub)
    if mode != "eventsource" and sub.state == "ok":
        return PushInForce("ok", "subscription", last_event=sub.last_state_change,
                           subscription=sub)
    if mode == "subscription" or (mode == "auto" and es is not None
                                   and es.state == "unavailable"):
        if sub.state == "degraded":
            return PushInForce("degraded", "subscription", sub.label.removeprefix("degraded: "),
                               sub.last_state_change, sub)
        if mode == "auto" and es is not None:  # no EventSource and no subscription
            return PushInForce("off", reason=REASONS["unavailable"], subscription=sub)
        return PushInForce("off", subscription=sub)
    if es is None or es.state == "off":
        return PushInForce("degraded", "eventsource", "no instance holds the EventSource yet",
                           subscription=sub)
    reason = REASONS.get(es.state, es.state)
    if es.detail:
        reason = f"{reason} ({es.detail})"
    return PushInForce("degraded", "eventsource", reason, es.last_event, sub)


async def read_in_force(redis: Redis, cfg: BusinessConfig | None, now: float, *,
                        enabled: bool = True) -> PushInForce:
    """`in_force` from Redis (two reads), as every instance sees it; `off` while processing
    is switched off (nothing holds the EventSource then)."""
    sub = await push_lifecycle.health(redis, now)
    if not enabled:
        return PushInForce("off", reason="processing is switched off", subscription=sub)
    if cfg is not None and cfg.mail_source == "imap":
        # IMAP's push is the IDLE holder's (`mail.imap.idle`, which imports this module).
        from messageweave.mail.imap import idle

        return await idle.read_in_force(redis)
    return in_force(cfg, await read_status(redis, keys.EVENTSOURCE_STATUS), sub)


async def ask_catchup(redis: Redis, account_id: str) -> None:
    """One pending catch-up for the account, the schedulers woken when it is new."""
    if await mailbox.request_catchup(redis, account_id):
        await mailbox.announce_catchup(redis, account_id)


class ReconnectCatchups:
    """The catch-ups a holder asks for on (re)connect: at most one per `interval_s`; one asked
    inside the interval is owed and asked at its end (once, however many reconnects)."""

    def __init__(self, redis: Redis, interval_s: float = RECONNECT_CATCHUP_S, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.redis = redis
        self.interval_s = interval_s
        self.clock = clock
        self._next = float("-inf")
        self._owed: asyncio.Task[None] | None = None

    async def reconnected(self, account: str) -> None:
        wait = self._next - self.clock()
        if wait <= 0:
            await self._ask(account)
        elif self._owed is None or self._owed.done():
            self._owed = asyncio.create_task(self._ask_later(account, wait))

    async def close(self) -> None:
        if self._owed is not None and not self._owed.done():
            await cancel(self._owed)

    async def _ask(self, account: str) -> None:
        self._next = self.clock() + self.interval_s
        await ask_catchup(self.redis, account)

    async def _ask_later(self, account: str, wait: float) -> None:
        await asyncio.sleep(wait)
        with contextlib.suppress(RedisError):  # the periodic pass still finds the mail
            await self._ask(account)


class EventSourceHolder:
    """The EventSource loop of one instance (`run`); `clock` is what the statuses call now,
    `lease_s` the TTL of its lease (`keys.EVENTSOURCE_LOCK_TTL_S`; a test shortens it)."""

    def __init__(self, svc: MailContext, *, clock: Callable[[], float] = time.time,
                 lease_s: int = keys.EVENTSOURCE_LOCK_TTL_S) -> None:
        self.svc = svc
        self.clock = clock
        self.lease_s = lease_s
        self.renew_s = lease_s / RENEWALS_PER_LEASE
        self.failures = RepeatLog(log)
        self.catchups = ReconnectCatchups(svc.redis)
        self._state = ""
        self._since = 0
        self._last_event: int | None = None
        self._heard = False  # this connection brought a ping or an event

    async def run(self) -> None:
        lost = 0
        while True:
            raise_if_cancelling()
            if not await self._wanted():
                await self.svc.config.changed_within(IDLE_S)
                continue
            try:
                held = await hold(eventsource_lock(self.svc.redis, self.lease_s), self._hold,
                                  self.renew_s)
                lost = 0
            except Exception as exc:  # LockLost, RedisError, a client closed under it
                raise_if_cancelling()
                self.failures.failed(PLACE, exc)
                lost += 1
                await asyncio.sleep(jittered_backoff(lost, BACKOFF_BASE_S, BACKOFF_CAP_S))
                continue
            if not held:
                await asyncio.sleep(self.renew_s)

    async def _wanted(self) -> bool:
        cfg = self.svc.config.config
        if (cfg is None or cfg.mail_source != "jmap" or cfg.push_mode not in WANTS_EVENTSOURCE
                or not self.svc.live):
            return False
        try:
            return await self.svc.store.enabled()
        except RedisError:
            return False

    async def _hold(self) -> None:
        """The holder's loop: connect, read, reconnect; returns when it is no longer wanted."""
        try:
            await self._connections()
        finally:
            await self.catchups.close()

    async def _connections(self) -> None:
        failures = 0
        while await self._wanted():
            cfg = self.svc.config.config
            try:
                client = await self.svc.jmap()
                await client.get_session()
                url = client.event_source_url(types=TYPES, ping_s=PING_S)
            except (JmapError, NotConfigured) as exc:
                failures += 1
                await self._failed(exc, failures)
                continue
            if url is None:
                await self._report("unavailable")
                await self.svc.config.changed_within(UNAVAILABLE_RECHECK_S)
                continue
            try:
                await self._listen(client, url, cfg)
            except JmapError as exc:
                failures = 1 if self._heard else failures + 1
                self._heard = False
                await self._failed(exc, failures)
                continue
            failures = 0  # a new configuration: connect again at once
        await self._report("off")

    async def _listen(self, client: JmapClient, url: str, cfg: BusinessConfig | None) -> None:
        """Read one connection until it fails (`JmapError`) or a new configuration is applied
        (then it returns, and the caller connects with the new client)."""
        reader = asyncio.ensure_future(self._read(client, url))
        try:
            while not reader.done():
                changed = asyncio.ensure_future(self.svc.config.changed_within(PING_S))
                await asyncio.wait({reader, changed}, return_when=asyncio.FIRST_COMPLETED)
                if not changed.done():
                    await cancel(changed)
                elif changed.result() and self.svc.config.config is not cfg:
                    return
            reader.result()
        finally:
            if not reader.done():
                with contextlib.suppress(Exception):
                    await cancel(reader)

    async def _read(self, client: JmapClient, url: str) -> None:
        account = client.account_id
        async for event in client.events(url, ping_s=PING_S):
            await self._on_event(account, event)

    async def _on_event(self, account: str, event: Event) -> None:
        now = int(self.clock())
        if event.type == "open":
            self._last_event, self._heard = None, False
            await self._report("connected")
            await self.catchups.reconnected(account)  # what came while we were away
            return
        if not self._heard:  # a connection that only opens has not recovered (its log stays)
            self.failures.recovered(PLACE)
        self._last_event, self._heard = now, True
        if event.type == "state":
            changed = state_change(event) or {}
            if CATCHUP_TYPES & changed.get(account, {}).keys():
                await ask_catchup(self.svc.redis, account)
        await self._report("connected")

    async def _failed(self, exc: BaseException, failures: int) -> None:
        raise_if_cancelling()
        self.failures.failed(PLACE, exc)
        if isinstance(exc, JmapAuthError):
            state, base = "refused", REFUSED_BASE_S
        elif isinstance(exc, JmapProtocolError):
            state = "bad_url" if "origin" in str(exc) else "not_event_stream"
            base = REFUSED_BASE_S
        else:
            state, base = "failing", BACKOFF_BASE_S
        await self._report(state, type(exc).__name__ if state == "failing" else "")
        await self.svc.config.changed_within(jittered_backoff(failures, base, BACKOFF_CAP_S))

    async def _report(self, state: str, detail: str = "") -> None:
        now = int(self.clock())
        if state != self._state:
            self._state, self._since = state, now
            if state == "connected":
                log.info("jmap push: EventSource connected")
            elif state != "off":
                log.warning("jmap push: %s", REASONS.get(state, state))
        await write_status(self.svc.redis, keys.EVENTSOURCE_STATUS, keys.EVENTSOURCE_STATUS_TTL_S,
                           LoopStatus(state, detail, now, self._since, self._last_event,
                                      self.svc.config.revision))


async def run_eventsource(svc: MailContext) -> None:
    """The app's background loop (`runtime.background`)."""
    await EventSourceHolder(svc).run()
