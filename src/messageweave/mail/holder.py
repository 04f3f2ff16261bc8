"""What the two push holders that need no public URL share: the JMAP EventSource holder
(`mail.eventsource`) and the IMAP IDLE holder (`mail.imap.idle`).

Every instance runs a holder's `run`; while the holder is wanted (a configuration, live,
processing on, and the holder's own condition: `_wants`), one instance at a time holds its
lease (`store.receivers.hold`, renewed `RENEWALS_PER_LEASE` times per TTL) and keeps its
connections (`_connections`, the protocol's part); the others stand by and try again every
renewal. A lease that could not be taken or kept is tried again after a jittered backoff.

- A failed connection is logged once per run of the same failure (`logs.RepeatLog`), reported
  as a state of the holder's `reasons` (`_failure_state`: which failure is which state, and its
  backoff base: `REFUSED_BASE_S` where a fix needs a person), and retried after a jittered
  backoff that a new configuration cuts short.
- The status (`store.receivers.LoopStatus`, at the holder's status key) is written on every
  report, for every instance to read (`/ready`, `diagnose`, `/metrics`, the page), and written
  again every `status_ttl_s / STATUS_REFRESHES_PER_TTL` while the lease is held (`_keep_status`):
  a backoff, a recheck or a connect that hangs until its timeout may last longer than the key's
  EX, and an expired status reads "no instance holds it yet" (issue #34).
- On every (re)connect the holder asks for a catch-up pass, at most one per
  `RECONNECT_CATCHUP_S` (`ReconnectCatchups`): mail that came while nobody listened is not
  left for the periodic pass.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import ClassVar

from redis.exceptions import RedisError

from messageweave.aio import cancel, jittered_backoff, raise_if_cancelling
from messageweave.config.model import BusinessConfig
from messageweave.logs import RepeatLog
from messageweave.mail.context import MailContext
from messageweave.store import catchup
from messageweave.store.keys import AccountKeys
from messageweave.store.locks import Lock
from messageweave.store.receivers import LoopStatus, hold, write_status
from messageweave.store.redis import Redis

RENEWALS_PER_LEASE = 3  # the lease is renewed this many times per its TTL
RECONNECT_CATCHUP_S = 10.0
BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 60.0
REFUSED_BASE_S = 30.0  # refused credentials, no such mailbox, no push offered: a person's fix
IDLE_S = 1.0  # while not wanted: how often the holder looks again
UNWANTED_S = 60.0  # the same while its configuration does not want it (`_unwanted_s`)
STATUS_REFRESHES_PER_TTL = 3  # a held lease writes its status again this often per its EX


async def ask_catchup(redis: Redis, account_id: str, names: AccountKeys) -> None:
    """One pending catch-up for the mail account `account_id` in the keys of `names` (the
    MessageWeave account's), the schedulers woken when it is new."""
    if await catchup.request_catchup(redis, account_id, names=names):
        await catchup.announce_catchup(redis, account_id)


class ReconnectCatchups:
    """The catch-ups a holder asks for on (re)connect: at most one per `interval_s`; one asked
    inside the interval is owed and asked at its end (once, however many reconnects)."""

    def __init__(self, redis: Redis, names: AccountKeys, interval_s: float = RECONNECT_CATCHUP_S,
                 *, clock: Callable[[], float] = time.monotonic) -> None:
        self.redis = redis
        self.names = names
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
        await ask_catchup(self.redis, account, self.names)

    async def _ask_later(self, account: str, wait: float) -> None:
        await asyncio.sleep(wait)
        with contextlib.suppress(RedisError):  # the periodic pass still finds the mail
            await self._ask(account)


class LeaseHolder(abc.ABC):
    """One instance's loop of a push holder (`run`) for one account (`svc.keys`). A subclass
    names its place in the failure log, its lease's and status's contract names (the account's
    keys are `status_key` and `lock_key`), the status's TTL, its states' words (`reasons`) and
    its log lines' prefix, and implements `_wants`, `_connections` and `_failure_state`.
    `clock` is what the statuses call now, `lease_s` the TTL of the lease (tests shorten it)."""

    place: ClassVar[str]
    lock_name: ClassVar[str]  # `default`'s (`keys.EVENTSOURCE_LOCK`); `lock_key` is the account's
    status_name: ClassVar[str]  # `default`'s name: `status_key` is the account's
    status_ttl_s: ClassVar[int]
    reasons: ClassVar[Mapping[str, str]]
    log_prefix: ClassVar[str]  # "jmap push": the start of the holder's log lines
    connected_line: ClassVar[str]  # what the log says once connected

    def __init__(self, svc: MailContext, log: logging.Logger, *, clock: Callable[[], float],
                 lease_s: int, catchup_s: float = RECONNECT_CATCHUP_S) -> None:
        self.svc = svc
        self.clock = clock
        self.lease_s = lease_s
        self.renew_s = lease_s / RENEWALS_PER_LEASE
        self.log = log
        self.failures = RepeatLog(log)
        self.catchups = ReconnectCatchups(svc.redis, svc.keys, catchup_s)
        self.lock_key = svc.keys.of(self.lock_name)
        self.status_key = svc.keys.of(self.status_name)
        self._state = ""
        self._since = 0
        self._last_event: int | None = None
        self._written: LoopStatus | None = None  # what this hold last wrote
        self._writing = asyncio.Lock()  # a refresh never lands after a newer report

    def _lock(self) -> Lock:
        """The lease: one instance at a time holds it (per account)."""
        return Lock(self.svc.redis, self.lock_key, self.lease_s)

    @abc.abstractmethod
    def _wants(self, cfg: BusinessConfig) -> bool:
        """Whether the configuration in force wants this holder at all."""

    @abc.abstractmethod
    async def _connections(self) -> None:
        """Connect, listen, reconnect while `_wanted`; then report `off` and return."""

    @abc.abstractmethod
    def _failure_state(self, exc: BaseException) -> tuple[str, float]:
        """The state a failed connection reports, and the base of its backoff."""

    async def run(self) -> None:
        lost = 0
        while True:
            raise_if_cancelling()
            if not await self._wanted():
                await self.svc.config.changed_within(self._unwanted_s())
                continue
            try:
                held = await hold(self._lock(), self._hold, self.renew_s)
                lost = 0
            except Exception as exc:  # LockLost, RedisError, a client closed under it
                raise_if_cancelling()
                self.failures.failed(self.place, exc)
                lost += 1
                await asyncio.sleep(jittered_backoff(lost, BACKOFF_BASE_S, BACKOFF_CAP_S))
                continue
            if not held:
                await asyncio.sleep(self.renew_s)

    def _unwanted_s(self) -> float:
        """How long a holder not wanted waits before it looks again (a new configuration ends
        the wait at once): `IDLE_S`, or `UNWANTED_S` when the configuration itself does not
        want it (the other protocol's holder of every account: one wake-up a second each was
        a large part of an idle instance's CPU at many accounts, issue #37)."""
        cfg = self.svc.config.config
        return UNWANTED_S if cfg is not None and not self._wants(cfg) else IDLE_S

    async def _wanted(self) -> bool:
        cfg = self.svc.config.config
        if cfg is None or not self._wants(cfg) or not self.svc.live:
            return False
        try:
            return await self.svc.store.switched_on()
        except RedisError:
            return False

    async def _hold(self) -> None:
        """The body run under the lease: returns when the holder is no longer wanted."""
        self._written = None  # another instance may have held it meanwhile
        keeper = asyncio.create_task(self._keep_status(), name=f"{self.place} status")
        try:
            await self._connections()
        finally:
            await cancel(keeper)
            await self.catchups.close()

    async def _keep_status(self) -> None:
        """Write the last status again, its `at` now, every `status_ttl_s /
        STATUS_REFRESHES_PER_TTL` while the lease is held, so it outlives every wait of the
        holder's (the poller's `_pause` does the same for Telegram's)."""
        while True:
            await asyncio.sleep(self.status_ttl_s / STATUS_REFRESHES_PER_TTL)
            async with self._writing:
                if self._written is None:
                    continue
                self._written = replace(self._written, at=int(self.clock()))
                with contextlib.suppress(RedisError):  # the next report or refresh writes it
                    await write_status(self.svc.redis, self.status_key, self.status_ttl_s,
                                       self._written)

    async def _failed(self, exc: BaseException, failures: int) -> None:
        """Log and report a failed connection, then wait out its backoff (`failures`-th in a
        row) or a new configuration."""
        raise_if_cancelling()
        self.failures.failed(self.place, exc)
        state, base = self._failure_state(exc)
        await self._report(state, type(exc).__name__ if state == "failing" else "")
        await self.svc.config.changed_within(jittered_backoff(failures, base, BACKOFF_CAP_S))

    async def _report(self, state: str, detail: str = "") -> None:
        now = int(self.clock())
        if state != self._state:
            self._state, self._since = state, now
            if state == "connected":
                self.log.info("%s: %s", self.log_prefix, self.connected_line)
            elif state != "off":
                self.log.warning("%s: %s", self.log_prefix, self.reasons.get(state, state))
        async with self._writing:
            self._written = LoopStatus(state, detail, now, self._since, self._last_event,
                                       self.svc.config.revision)
            await write_status(self.svc.redis, self.status_key, self.status_ttl_s,
                               self._written)
