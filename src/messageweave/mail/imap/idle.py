"""New IMAP mail within a second or two: the IDLE holder (issue #33; SPEC Part F.2), on the
lease pattern of the JMAP EventSource holder (`mail.eventsource`).

Every instance runs `run_idle`; while `mail_source` is `imap`, one at a time holds
`lock:imap-idle` (`mail.holder.LeaseHolder`: the lease, the backoff, the status) and keeps one IMAP
connection per notify mailbox, each `SELECT`ed read-only and idling (`ImapClient.idle`), IDLE
re-issued every `IDLE_RENEW_S` (RFC 2177: before the server's 30-minute cut).

- On every (re)connect it asks for a catch-up pass, at most one per `RECONNECT_CATCHUP_S`
  (`mail.holder.ReconnectCatchups`): mail that came while nobody idled is not left for the
  periodic pass.
- Any news during IDLE (EXISTS, EXPUNGE, FETCH) asks for one exactly as an EventSource event
  does (`store.catchup.request_catchup` + `announce_catchup`): the catch-up pass stays the
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

from messageweave.aio import cancel
from messageweave.config.model import BusinessConfig
from messageweave.mail.context import MailContext
from messageweave.mail.eventsource import PushInForce, degraded
from messageweave.mail.holder import (
    BACKOFF_BASE_S,
    RECONNECT_CATCHUP_S,
    REFUSED_BASE_S,
    LeaseHolder,
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
from messageweave.mail.kinds import kind_of
from messageweave.mail.push_lifecycle import PushHealth
from messageweave.store import keys
from messageweave.store.keys import AccountKeys
from messageweave.store.receivers import LoopStatus, read_status
from messageweave.store.redis import Redis

log = logging.getLogger(__name__)

IDLE_RENEW_S = 28 * 60.0  # IDLE is re-issued this often: before RFC 2177's 29 minutes
STATUS_S = 30.0  # the status is rewritten this often while held (its EX is 120 s)
PLACE = "imap idle"

REASONS = {
    "connecting": "IMAP IDLE connecting",
    "failing": "IMAP IDLE connection lost, reconnecting",
    "refused": "the IMAP server refused the credentials",
    "no_mailbox": "a notify mailbox cannot be selected",
    "no_idle": "the IMAP server does not offer IDLE",
}


def in_force(status: LoopStatus | None) -> PushInForce:
    """The push in force for an IMAP wire: `ok (idle)` while the holder idles, else degraded
    with the holder's reason."""
    sub = PushHealth("off")  # a JMAP PushSubscription has no say for an IMAP wire
    if status is not None and status.state == "connected":
        return PushInForce("ok", "idle", last_event=status.last_event, subscription=sub)
    return degraded("idle", status, REASONS, "no instance holds the IMAP IDLE yet", sub)


async def read_in_force(redis: Redis, names: AccountKeys = keys.DEFAULT) -> PushInForce:
    """`in_force` of the account of `names`."""
    return in_force(await read_status(redis, names.of(keys.IMAP_IDLE_STATUS)))


class IdleHolder(LeaseHolder):
    """The IDLE loop of one instance (`mail.holder.LeaseHolder.run`). `lease_s`, `idle_s` and
    `catchup_s` are the lease's TTL, the IDLE renewal and the reconnect catch-up interval
    (tests shorten them)."""

    place = PLACE
    lock_name = keys.IMAP_IDLE_LOCK
    status_name = keys.IMAP_IDLE_STATUS
    status_ttl_s = keys.IMAP_IDLE_STATUS_TTL_S
    reasons = REASONS
    log_prefix = "imap push"
    connected_line = "IDLE connected"

    def __init__(self, svc: MailContext, *, clock: Callable[[], float] = time.time,
                 lease_s: int = keys.IMAP_IDLE_LOCK_TTL_S, idle_s: float = IDLE_RENEW_S,
                 catchup_s: float = RECONNECT_CATCHUP_S) -> None:
        super().__init__(svc, log, clock=clock, lease_s=lease_s, catchup_s=catchup_s)
        self.idle_s = idle_s
        self._healthy = False  # an IDLE round completed on this connection

    def _wants(self, cfg: BusinessConfig) -> bool:
        return kind_of(cfg).push == "idle"

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
                await ask_catchup(self.svc.redis, account, self.svc.keys)

    def _failure_state(self, exc: BaseException) -> tuple[str, float]:
        if isinstance(exc, ImapAuthError):
            return "refused", REFUSED_BASE_S
        if isinstance(exc, ImapCapabilityError):
            return "no_idle", REFUSED_BASE_S
        if isinstance(exc, ImapCommandError) and exc.command in ("SELECT", "EXAMINE"):
            return "no_mailbox", REFUSED_BASE_S
        return "failing", BACKOFF_BASE_S


async def run_idle(svc: MailContext) -> None:
    """The app's background loop (`runtime.background`)."""
    await IdleHolder(svc).run()
