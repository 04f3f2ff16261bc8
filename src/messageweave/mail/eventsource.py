"""JMAP push through EventSource (RFC 8620 §7.3; issue #22): new mail within about a second,
with no public URL and no PushSubscription.

Every instance runs `run_eventsource`; one at a time holds `lock:jmap-eventsource`
(`mail.holder.LeaseHolder`: the lease, the backoff, the status) and keeps one connection to the
session's `eventSourceUrl`, expanded with `types=Email`, `closeafter=no` and `ping=PING_S`,
authenticated and trusted like the JMAP client (it is the JMAP client's own connection pool;
the URL must be on the session's origin).

- Right after a (re)connect the holder asks for a catch-up pass, so mail that arrived while
  it was away does not wait for the periodic one (the server sends no state on connect); at
  most one per `RECONNECT_CATCHUP_S`: one asked inside it is owed to the interval's end
  (`mail.holder.ReconnectCatchups`).
- Each `state` event that names our account's `Email` (or `EmailDelivery`) asks for one
  exactly as a StateChange does (`store.catchup.request_catchup` + `announce_catchup`): many
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from messageweave.aio import cancel
from messageweave.config.live import NotConfigured
from messageweave.config.model import BusinessConfig
from messageweave.mail import push_lifecycle
from messageweave.mail.context import MailContext
from messageweave.mail.holder import BACKOFF_BASE_S, REFUSED_BASE_S, LeaseHolder, ask_catchup
from messageweave.mail.jmap import (
    JmapAuthError,
    JmapClient,
    JmapError,
    JmapOffOriginError,
    JmapProtocolError,
)
from messageweave.mail.jmap.eventsource import Event, state_change
from messageweave.mail.kinds import kind_of
from messageweave.store import keys
from messageweave.store.keys import AccountKeys
from messageweave.store.receivers import LoopStatus, read_status
from messageweave.store.redis import Redis

log = logging.getLogger(__name__)

PING_S = 30
TYPES = ("Email",)
CATCHUP_TYPES = frozenset({"Email", "EmailDelivery"})
UNAVAILABLE_RECHECK_S = 60.0  # the session offers no EventSource: look again this often
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


def push_mode_of(cfg: BusinessConfig, names: AccountKeys) -> str:
    """`cfg.push_mode` as the account of `names` follows it. The webhook PushSubscription is
    `default`'s only (its callback route and keys are; reference §7.16): another account's
    `subscription` is `auto`, EventSource when its server offers it, else the periodic and the
    degraded-push passes."""
    if cfg.push_mode == "subscription" and names != keys.DEFAULT:
        return "auto"
    return cfg.push_mode


def in_force(cfg: BusinessConfig | None, es: LoopStatus | None,
             sub: push_lifecycle.PushHealth, names: AccountKeys = keys.DEFAULT) -> PushInForce:
    """Combine the EventSource holder's status and the subscription's health under
    `push_mode` (`push_mode_of` the account of `names`). A live EventSource wins; a healthy
    subscription next; else the first one `push_mode` wants says why it is degraded, or push
    is off."""
    mode = push_mode_of(cfg, names) if cfg is not None else "auto"
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
    return degraded("eventsource", es, REASONS, "no instance holds the EventSource yet", sub)


def degraded(way: Literal["eventsource", "idle"], status: LoopStatus | None,
             reasons: Mapping[str, str], nobody: str,
             sub: push_lifecycle.PushHealth) -> PushInForce:
    """A holder's push while it is not connected: `nobody` when no instance holds it (no
    status, or `off`), else its state's words and the status's detail."""
    if status is None or status.state == "off":
        return PushInForce("degraded", way, nobody, subscription=sub)
    reason = reasons.get(status.state, status.state)
    if status.detail:
        reason = f"{reason} ({status.detail})"
    return PushInForce("degraded", way, reason, status.last_event, sub)


async def read_in_force(redis: Redis, cfg: BusinessConfig | None, now: float, *,
                        enabled: bool = True, names: AccountKeys = keys.DEFAULT
                        ) -> PushInForce:
    """`in_force` of the account of `names` from Redis (two reads), as every instance sees
    it; `off` while processing is switched off (nothing holds the EventSource then). Only
    `default` has a PushSubscription (`push_mode_of`): another account's is `off`."""
    if names == keys.DEFAULT:
        sub = await push_lifecycle.health(redis, now)
    else:
        sub = push_lifecycle.PushHealth("off")
    if not enabled:
        return PushInForce("off", reason="processing is switched off", subscription=sub)
    if cfg is not None and kind_of(cfg).push == "idle":
        # IMAP's push is the IDLE holder's (`mail.imap.idle`, which imports this module).
        from messageweave.mail.imap import idle

        return await idle.read_in_force(redis, names)
    status = await read_status(redis, names.of(keys.EVENTSOURCE_STATUS))
    return in_force(cfg, status, sub, names)


class EventSourceHolder(LeaseHolder):
    """The EventSource loop of one instance (`mail.holder.LeaseHolder.run`); `clock` is what
    the statuses call now, `lease_s` the TTL of its lease (`keys.EVENTSOURCE_LOCK_TTL_S`; a
    test shortens it)."""

    place = PLACE
    lock_name = keys.EVENTSOURCE_LOCK
    status_name = keys.EVENTSOURCE_STATUS
    status_ttl_s = keys.EVENTSOURCE_STATUS_TTL_S
    reasons = REASONS
    log_prefix = "jmap push"
    connected_line = "EventSource connected"

    def __init__(self, svc: MailContext, *, clock: Callable[[], float] = time.time,
                 lease_s: int = keys.EVENTSOURCE_LOCK_TTL_S) -> None:
        super().__init__(svc, log, clock=clock, lease_s=lease_s)
        self._heard = False  # this connection brought a ping or an event

    def _wants(self, cfg: BusinessConfig) -> bool:
        return (kind_of(cfg).push == "eventsource"
                and push_mode_of(cfg, self.svc.keys) in WANTS_EVENTSOURCE)

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
                await ask_catchup(self.svc.redis, account, self.svc.keys)
        await self._report("connected")

    def _failure_state(self, exc: BaseException) -> tuple[str, float]:
        if isinstance(exc, JmapAuthError):
            return "refused", REFUSED_BASE_S
        if isinstance(exc, JmapOffOriginError):
            return "bad_url", REFUSED_BASE_S
        if isinstance(exc, JmapProtocolError):
            return "not_event_stream", REFUSED_BASE_S
        return "failing", BACKOFF_BASE_S


async def run_eventsource(svc: MailContext) -> None:
    """The app's background loop (`runtime.background`)."""
    await EventSourceHolder(svc).run()
