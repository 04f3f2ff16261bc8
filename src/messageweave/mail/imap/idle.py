"""New IMAP mail within a second or two: the IDLE holder (issue #33; SPEC Part F.2), on the
lease pattern of the JMAP EventSource holder (`mail.eventsource`).

Every instance runs `run_idle`; while `mail_source` is `imap`, one at a time holds
`lock:imap-idle` (`store.receivers.hold`) and keeps one IMAP connection per notify mailbox,
each `SELECT`ed read-only and idling (`ImapClient.idle`), IDLE re-issued every `IDLE_RENEW_S`
(RFC 2177: before the server's 30-minute cut).

- On every (re)connect it asks for a catch-up pass, at most one per `RECONNECT_CATCHUP_S`
  (`mail.eventsource.ReconnectCatchups`): mail that came while nobody idled is not left for the
  periodic pass.
- Any news during IDLE (EXISTS, EXPUNGE, FETCH) asks for one exactly as an EventSource event
  does (`store.mailbox.request_catchup` + `announce_catchup`): the catch-up pass stays the
  truth, the news only a hint. The account is the IMAP user name.
- A connection that fails (refused, dropped, no such mailbox, no IDLE) closes them all and
  reconnects after a jittered backoff; only a completed IDLE round resets it, so a server that
  accepts and drops at once is backed off.
- Its status `push:imap-idle:status` (`connected` → `ok (idle)`, else `degraded: <reason>`,
  `REASONS`) is rewritten every `STATUS_S`; `read_in_force` reads it for `/ready`, `diagnose`,
  `/api/push/status`, `/metrics` and the scheduler's degraded-push backup pass.

A new configuration reconnects with its settings; a switch to JMAP lets the lease go (the
EventSource holder takes over), a switch back takes it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from redis.exceptions import RedisError

from messageweave.aio import cancel, jittered_backoff, raise_if_cancelling
from messageweave.config.model import BusinessConfig
from messageweave.logs import RepeatLog
from messageweave.mail.context import MailContext
from messageweave.mail.eventsource import (
    RECONNECT_CATCHUP_S,
    PushInForce,
    ReconnectCatchups,
    ask_catchup,
)
from messageweave.mail.imap.client import ImapClient
from messageweave.mail.imap.errors import (
    ImapAuthError,
    ImapCapabilityError,
    ImapCommandError,
    ImapError,
)
from messageweave.mail.imap.watch import new_imap_client
from messageweave.mail.push_lifecycle import PushHealth
from messageweave.store import keys
from messageweave.store.mailbox import Lock
from messageweave.store.receivers import LoopStatus, hold, read_status, write_status
from messageweave.store.redis import Redis

log = logging.getLogger(__name__)

IDLE_RENEW_S = 28 * 60.0  # IDLE is re-issued this often: before RFC 2177's 29 minutes
STATUS_S = 30.0  # the status is rewritten this often while held (its EX is 120 s)
RENEWALS_PER_LEASE = 3
BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 60.0
REFUSED_BASE_S = 30.0  # refused credentials, no such mailbox, no IDLE: a fix needs a person
IDLE_S = 1.0
PLACE = "imap idle"

REASONS = {
    "connecting": "IMAP IDLE connecting",
    "failing": "IMAP IDLE connection lost, reconnecting",
    "refused": "the IMAP server refused the credentials",
    "no_mailbox": "a notify mailbox cannot be selected",
    "no_idle": "the IMAP server does not offer IDLE",
}


def idle_lock(redis: Redis, ttl_s: int = keys.IMAP_IDLE_LOCK_TTL_S) -> Lock:
    return Lock(redis, keys.IMAP_IDLE_LOCK, ttl_s)


def in_force(status: LoopStatus | None) -> PushInForce:
    """The push in force for an IMAP wire: `ok (idle)` while the holder idles, else degraded
    with the holder's reason."""
    sub = PushHealth("off")  # a JMAP PushSubscription has no say for an IMAP wire
    if status is not None and status.state == "connected":
        return PushInForce("ok", "idle", last_event=status.last_event, subscription=sub)
    if status is None or status.state == "off":
        return PushInForce("degraded", "idle", "no instance holds the IMAP IDLE yet",
                           subscription=sub)
    reason = REASONS.get(status.state, status.state)
    if status.detail:
        reason = f"{reason} ({status.detail})"
    return PushInForce("degraded", "idle", reason, status.last_event, sub)


async def read_in_force(redis: Redis) -> PushInForce:
    return in_force(await read_status(redis, keys.IMAP_IDLE_STATUS))


class IdleHolder:
    """The IDLE loop of one instance (`run`). `lease_s`, `idle_s` and `catchup_s` are the
    lease's TTL, the IDLE renewal and the reconnect catch-up interval (tests shorten them)."""

    def __init__(self, svc: MailContext, *, clock: Callable[[], float] = time.time,
                 lease_s: int = keys.IMAP_IDLE_LOCK_TTL_S, idle_s: float = IDLE_RENEW_S,
                 catchup_s: float = RECONNECT_CATCHUP_S) -> None:
        self.svc = svc
        self.clock = clock
        self.lease_s = lease_s
        self.renew_s = lease_s / RENEWALS_PER_LEASE
        self.idle_s = idle_s
        self.failures = RepeatLog(log)
        self.catchups = ReconnectCatchups(svc.redis, catchup_s)
        self._state = ""
        self._since = 0
        self._last_event: int | None = None
        self._healthy = False  # an IDLE round completed on this connection

    async def run(self) -> None:
        lost = 0
        while True:
            raise_if_cancelling()
            if not await self._wanted():
                await self.svc.config.changed_within(IDLE_S)
                continue
            try:
                held = await hold(idle_lock(self.svc.redis, self.lease_s), self._hold,
                                  self.renew_s)
                lost = 0
            except Exception as exc:  # LockLost, RedisError
                raise_if_cancelling()
                self.failures.failed(PLACE, exc)
                lost += 1
                await asyncio.sleep(jittered_backoff(lost, BACKOFF_BASE_S, BACKOFF_CAP_S))
                continue
            if not held:
                await asyncio.sleep(self.renew_s)

    async def _wanted(self) -> bool:
        cfg = self.svc.config.config
        if cfg is None or cfg.mail_source != "imap" or not self.svc.live:
            return False
        try:
            return await self.svc.store.enabled()
        except RedisError:
            return False

    async def _hold(self) -> None:
        try:
            await self._connections()
        finally:
            await self.catchups.close()

    async def _connections(self) -> None:
        failures = 0
        while await self._wanted():
            cfg = self.svc.config.config
            assert cfg is not None
            try:
                await self._watch(cfg)
            except (ImapError, ValueError) as exc:
                failures = 1 if self._healthy else failures + 1
                self._healthy = False
                await self._failed(exc, failures)
                continue
            failures = 0  # a new configuration: connect again at once
        await self._report("off")

    async def _watch(self, cfg: BusinessConfig) -> None:
        """Connect one client per notify mailbox and idle on each until one fails (raises) or
        a new configuration is applied (returns)."""
        clients: list[ImapClient] = []
        tasks: list[asyncio.Task[None]] = []
        try:
            for name in dict.fromkeys(cfg.imap_notify_mailboxes):
                client = new_imap_client(cfg, self.svc.config.outbound)
                clients.append(client)
                await client.connect()
                if "IDLE" not in client.capabilities:
                    raise ImapCapabilityError("the server does not offer IDLE")
                await client.select(name, readonly=True)
            self._last_event = None
            await self._report("connected")
            await self.catchups.reconnected(cfg.imap_username)
            tasks = [asyncio.ensure_future(self._idle(c, cfg.imap_username)) for c in clients]
            await self._until_changed(tasks, cfg)
        finally:
            for task in tasks:
                if not task.done():
                    with contextlib.suppress(Exception):
                        await cancel(task)
            for client in clients:
                await client.aclose()

    async def _until_changed(self, tasks: list[asyncio.Task[None]],
                             cfg: BusinessConfig) -> None:
        while True:
            changed = asyncio.ensure_future(self.svc.config.changed_within(STATUS_S))
            done, _ = await asyncio.wait({*tasks, changed}, return_when=asyncio.FIRST_COMPLETED)
            if not changed.done():
                await cancel(changed)
            for task in done - {changed}:
                task.result()  # an IDLE loop ends only by raising
            if changed.done() and changed.result() and self.svc.config.config is not cfg:
                return
            await self._report("connected")  # keeps the status alive past its EX

    async def _idle(self, client: ImapClient, account: str) -> None:
        while True:
            news = await client.idle(self.idle_s)
            self._last_event = int(self.clock())
            if not self._healthy:
                self._healthy = True
                self.failures.recovered(PLACE)
            if news:
                await ask_catchup(self.svc.redis, account)

    async def _failed(self, exc: BaseException, failures: int) -> None:
        raise_if_cancelling()
        self.failures.failed(PLACE, exc)
        state, base = "failing", BACKOFF_BASE_S
        if isinstance(exc, ImapAuthError):
            state, base = "refused", REFUSED_BASE_S
        elif isinstance(exc, ImapCapabilityError):
            state, base = "no_idle", REFUSED_BASE_S
        elif isinstance(exc, ImapCommandError) and exc.command in ("SELECT", "EXAMINE"):
            state, base = "no_mailbox", REFUSED_BASE_S
        await self._report(state, type(exc).__name__ if state == "failing" else "")
        await self.svc.config.changed_within(jittered_backoff(failures, base, BACKOFF_CAP_S))

    async def _report(self, state: str, detail: str = "") -> None:
        now = int(self.clock())
        if state != self._state:
            self._state, self._since = state, now
            if state == "connected":
                log.info("imap push: IDLE connected")
            elif state != "off":
                log.warning("imap push: %s", REASONS.get(state, state))
        await write_status(self.svc.redis, keys.IMAP_IDLE_STATUS, keys.IMAP_IDLE_STATUS_TTL_S,
                           LoopStatus(state, detail, now, self._since, self._last_event,
                                      self.svc.config.revision))


async def run_idle(svc: MailContext) -> None:
    """The app's background loop (`runtime.background`)."""
    await IdleHolder(svc).run()
