"""Telegram long polling (issue #22): the bot hears its owner with no public URL.

Every instance runs `run_poller`; one of them at a time holds `lock:telegram-poll`
(`store.receivers.hold`) and is the cluster's receiver:

- `telegram_updates` = `auto` (the default): it polls `getUpdates` while Telegram has no webhook
  on file (`getWebhookInfo`), and stands by, asking again every `WEBHOOK_CHECK_S`, while one is
  registered (from the page or the CLI); `polling`: it always polls, and deletes a registered
  webhook first; `webhook`: it only watches that a webhook is registered.
- Each update takes the webhook's path: `pipeline.ingress.parse_update` (the allowlist; a
  refused chat is recorded for the page), then the webhook's script (the service switch, the
  `update_id` dedup, the `XADD` to `stalwart:telegram`), so the same worker answers it.
- The next offset is stored in Redis (`store.receivers.save_offset`, fenced by the lease) only
  after the updates are queued, and Telegram learns it with the next call. A crash between the
  two costs a redelivery, which the `update_id` dedup drops: none lost, none doubled.
- Telegram's answers: 409 (a webhook, or another program polling with this token) is reported
  and backed off; 401 stops polling until the token changes; 429 waits `retry_after`; a network
  failure or a 5xx waits a jittered, doubling backoff (`BACKOFF_CAP_S`). No failure loops hot.

What the holder sees is written to `telegram:updates:status` (`store.receivers`), which
`/ready`, `diagnose` and the page read as `updates_label`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from redis.exceptions import RedisError

from messageweave.aio import first_done, jittered_backoff, raise_if_cancelling
from messageweave.chat.telegram import FailureClass, TelegramClient, TelegramSendError
from messageweave.config.model import BusinessConfig
from messageweave.jsonio import is_int
from messageweave.logs import RepeatLog
from messageweave.ops import metrics
from messageweave.pipeline.ingress import (
    ChatNotAllowed,
    Update,
    UpdateInvalid,
    parse_update,
    remember_refused,
)
from messageweave.services import Services
from messageweave.store import keys
from messageweave.store.locks import LockLost
from messageweave.store.receivers import (
    LoopStatus,
    hold,
    poll_lock,
    read_offset,
    read_status,
    save_offset,
    watch_webhook_changes,
    write_status,
)
from messageweave.store.streams import MAX_INGRESS_BATCH, StreamStore, SwitchedOff

log = logging.getLogger(__name__)

POLL_TIMEOUT_S = 25  # getUpdates' long poll (Telegram allows up to 50)
ALLOWED_UPDATES = ("message", "callback_query")
RENEW_S = keys.TELEGRAM_POLL_LOCK_TTL_S / 3
WEBHOOK_CHECK_S = 10.0  # `auto` with a webhook: how often getWebhookInfo is asked
WEBHOOK_WATCH_S = 60.0  # `webhook`: how often it is asked (only to report one missing)
BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 60.0
CONFLICT_BASE_S = 5.0  # 409 from another program: it may be a second copy of this service
STATUS_REFRESH_S = keys.UPDATES_STATUS_TTL_S / 3  # a pause writes the status again this often
IDLE_S = 1.0  # not configured, switched off, or standing by: how often the loop looks again
PLACE = "telegram long poll"
CHECK_PLACE = "telegram webhook check"  # getWebhookInfo (and the deleteWebhook of `polling`)

# state code → what `/ready` says after `degraded: ` (the ok states are `OK_STATES`).
REASONS = {
    "no_webhook": "no webhook is registered with Telegram (telegram_updates is webhook)",
    "conflict": "another program receives this bot's updates (Telegram answered 409 Conflict)",
    "unauthorized": "Telegram refused the bot token (401): updates stop until it changes",
    "rate_limited": "Telegram asked us to slow down (429)",
    "unreachable": "Telegram is unreachable",
}
OK_STATES = {"polling": "ok (polling)", "webhook": "ok (webhook)"}

def updates_label(status: LoopStatus | None, *, enabled: bool, configured: bool) -> str:
    """`ok (polling)`, `ok (webhook)`, `degraded: <reason>` or `off`, from what the holder
    last wrote (`None`: nobody wrote within `UPDATES_STATUS_TTL_S`)."""
    if not configured or not enabled:
        return "off"
    if status is None:
        return "degraded: no instance is receiving Telegram updates yet"
    if status.state in OK_STATES:
        return OK_STATES[status.state]
    if status.state == "off":
        return "off"
    return f"degraded: {REASONS.get(status.state, status.state)}"


async def read_label(svc: Services) -> str:
    """`updates_label` of the cluster (one Redis read, plus the switch)."""
    return updates_label(await read_status(svc.redis, keys.UPDATES_STATUS),
                         enabled=await svc.store.enabled(), configured=svc.live)


def backoff_s(failures: int, base_s: float = BACKOFF_BASE_S) -> float:
    return jittered_backoff(failures, base_s, BACKOFF_CAP_S)


@dataclass
class _Held:
    """What one holder keeps between polls."""

    token: str
    offset: int | None
    failures: int = 0
    state: str = ""
    since: int = 0
    check_webhook: bool = True  # ask getWebhookInfo before the next poll
    conflicts: int = 0  # 409s in a row: only a long poll that ends normally clears them


class Poller:
    """The receiving loop of one instance (`run`); `clock` is what the statuses call now."""

    def __init__(self, svc: Services, *, clock: Callable[[], float] = time.time) -> None:
        self.svc = svc
        self.clock = clock
        self.failures = RepeatLog(log)
        self._refused_token: str | None = None  # a token Telegram answered 401 to
        self._lock = poll_lock(svc.redis)  # a new owner token for each time it is taken
        self._webhook_changed = asyncio.Event()  # set by this instance's webhook routes
        watch_webhook_changes(svc.redis, self._webhook_changed)
        self._written: LoopStatus | None = None  # what `_report` last wrote

    async def run(self) -> None:
        """Until cancelled: take the lease when it is free and receive while it is held."""
        lost = 0
        while True:
            raise_if_cancelling()
            if not await self._wanted():
                await asyncio.sleep(IDLE_S)
                continue
            try:
                self._lock = poll_lock(self.svc.redis)
                held = await hold(self._lock, self._receive, RENEW_S)
                lost = 0
            except Exception as exc:  # LockLost, RedisError, a client closed under it
                raise_if_cancelling()
                self.failures.failed(PLACE, exc)
                lost += 1
                await asyncio.sleep(backoff_s(lost))
                continue
            if not held:  # another instance receives; look again within a third of its lease
                await asyncio.sleep(RENEW_S)

    async def _wanted(self) -> bool:
        try:
            return self.svc.live and await self.svc.store.enabled()
        except RedisError:
            return False

    async def _receive(self) -> None:
        """The holder's loop: returns when the configuration goes or the switch is off."""
        cfg = self.svc.config.config
        if cfg is None:
            return
        held = _Held(cfg.bot_token, await read_offset(self.svc.redis, cfg.bot_token))
        while True:
            raise_if_cancelling()
            cfg, runtime = self.svc.config.config, self.svc.runtime
            if cfg is None or runtime is None or not await self.svc.store.enabled():
                await self._report(held, "off", "processing is switched off")
                return
            if cfg.bot_token != held.token:  # another bot: its own offset
                held = _Held(cfg.bot_token, await read_offset(self.svc.redis, cfg.bot_token))
            if self._refused_token == cfg.bot_token:  # nothing to ask until it changes
                await self._report(held, "unauthorized")
                await self._pause(WEBHOOK_CHECK_S)
                continue
            await self._step(held, cfg, runtime.telegram)

    async def _step(self, held: _Held, cfg: BusinessConfig, telegram: TelegramClient) -> None:
        place = PLACE  # what a failure is logged as: with `webhook` no long poll is made
        try:
            if cfg.telegram_updates == "webhook" or held.check_webhook:
                place = CHECK_PLACE
                standing_by = await self._standing_by(held, cfg, telegram)
                self.failures.recovered(CHECK_PLACE)
                if standing_by:
                    await self._stand_by(WEBHOOK_WATCH_S if cfg.telegram_updates == "webhook"
                                         else WEBHOOK_CHECK_S)
                    return
                place = PLACE
            if held.failures == 0 and held.state != "polling":  # polling from now on
                await self._report(held, "polling")
            raws = await self._poll(held, telegram)
        except TelegramSendError as exc:
            await self._failed(held, cfg, exc, place)
            return
        if raws is None:
            return
        self.failures.recovered(PLACE)
        if held.failures == 0:  # a long poll that ended normally: no other program polls
            held.conflicts = 0
        held.failures = 0
        await self._report(held, "polling")
        try:
            await self._take(held, cfg, raws)
        except SwitchedOff:
            return  # the next turn reports it; nothing confirmed, Telegram keeps them

    async def _poll(self, held: _Held, telegram: TelegramClient) -> list[object] | None:
        """One long poll, given up when a new configuration is applied meanwhile (another
        mode or token must act at once): then None, and whatever Telegram answered is left
        unconfirmed, so it comes again."""
        revision = self.svc.config.revision
        # After a failure a short call first: its answer says at once that Telegram is back.
        timeout_s = 0 if held.failures else POLL_TIMEOUT_S
        poll = asyncio.ensure_future(telegram.get_updates(
            held.offset, timeout_s=timeout_s, allowed_updates=ALLOWED_UPDATES))
        await first_done(poll, asyncio.ensure_future(
            self.svc.config.changed_within(POLL_TIMEOUT_S + 30)))
        if poll.cancelled() or not poll.done():
            return None
        if poll.exception() is not None and self.svc.config.revision != revision:
            return None  # the new configuration closed the client under it: not a failure
        return poll.result()

    async def _standing_by(self, held: _Held, cfg: BusinessConfig,
                           telegram: TelegramClient) -> bool:
        """Whether a webhook receives the updates now (the holder then only watches). With
        `polling`, a registered webhook is deleted instead (its pending updates stay)."""
        url = await telegram.webhook_url()
        held.check_webhook = cfg.telegram_updates == "webhook"
        if cfg.telegram_updates == "polling" and url:
            await telegram.delete_webhook()
            log.info("telegram_updates is polling: the registered webhook was deleted")
            return False
        if url:
            held.failures, held.conflicts, held.check_webhook = 0, 0, True
            await self._report(held, "webhook")
            return True
        if cfg.telegram_updates == "webhook":
            await self._report(held, "no_webhook")
            return True
        return False

    async def _take(self, held: _Held, cfg: BusinessConfig, raws: list[object]) -> None:
        """Queue what can be queued, record the refused chats, then store the next offset."""
        updates: list[Update] = []
        refused: list[ChatNotAllowed] = []
        next_offset = held.offset
        for raw in raws:
            update_id = raw.get("update_id") if isinstance(raw, dict) else None
            if not is_int(update_id):
                continue
            next_offset = max(next_offset or 0, update_id + 1)
            try:
                updates.append(parse_update(raw, cfg, self.svc.accounts.allowlist()))
            except UpdateInvalid:
                log.warning("telegram update %d is not one we read: skipped", update_id)
            except ChatNotAllowed as exc:
                refused.append(exc)
        store, queued = StreamStore(self.svc.redis), 0
        for start in range(0, len(updates), MAX_INGRESS_BATCH):
            chunk = updates[start:start + MAX_INGRESS_BATCH]
            ids = await store.enqueue_updates_if_enabled([(u.update_id, u.fields) for u in chunk])
            queued += sum(1 for entry in ids if entry)
        if queued:
            metrics.observe_ingest("telegram_polling", queued)
        for refusal in refused:
            await remember_refused(self.svc.redis, refusal)
        if next_offset is not None and next_offset != held.offset:
            if not await save_offset(self.svc.redis, self._lock, cfg.bot_token, next_offset):
                raise LockLost(keys.TELEGRAM_POLL_LOCK)
            held.offset = next_offset

    async def _failed(self, held: _Held, cfg: BusinessConfig, exc: TelegramSendError,
                      place: str) -> None:
        self.failures.failed(place, exc)
        held.failures += 1
        kind = exc.failure_class
        if kind is FailureClass.AUTH:
            self._refused_token = cfg.bot_token
            await self._report(held, "unauthorized")
            return
        if kind is FailureClass.CONFLICT:
            held.check_webhook = True  # a webhook registered meanwhile is not a conflict
            held.conflicts += 1
            if held.conflicts == 1:
                return  # look at once: setWebhook ends a long poll with this 409 too
            await self._report(held, "conflict")
            await self._pause(backoff_s(held.conflicts - 1, CONFLICT_BASE_S))
            return
        if kind is FailureClass.RATE_LIMIT and exc.retry_after is not None:
            await self._report(held, "rate_limited", f"retry after {exc.retry_after:g} s")
            await self._pause(exc.retry_after)
            return
        await self._report(held, "unreachable", exc.description[:200])
        await self._pause(backoff_s(held.failures))

    async def _pause(self, seconds: float) -> None:
        """Wait `seconds`, or less when a new configuration revision comes (a fixed token,
        another mode). The status is written again every `STATUS_REFRESH_S` meanwhile: a
        backoff or a webhook watch may last as long as the status key's TTL, and an expired
        status reads "no instance is receiving yet" (issue #34: the page said so in the middle
        of a Telegram outage)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if await self.svc.config.changed_within(min(left, STATUS_REFRESH_S)):
                return
            if self._written is not None and left > STATUS_REFRESH_S:
                self._written = replace(self._written, at=int(self.clock()))
                await write_status(self.svc.redis, keys.UPDATES_STATUS,
                                   keys.UPDATES_STATUS_TTL_S, self._written)

    async def _stand_by(self, seconds: float) -> None:
        """`_pause`, ended early too when this instance deleted or registered the webhook
        (`store.receivers.webhook_changed`): the owner who deleted it on the page is heard at
        once, not at the next check. A change made before the pause began counts too."""
        await first_done(asyncio.ensure_future(self._webhook_changed.wait()),
                         asyncio.ensure_future(self._pause(seconds)))
        self._webhook_changed.clear()

    async def _report(self, held: _Held, state: str, detail: str = "") -> None:
        now = int(self.clock())
        if state != held.state:
            held.state, held.since = state, now
            if state in OK_STATES:
                log.info("telegram updates: %s", OK_STATES[state])
            else:
                log.warning("telegram updates: %s", REASONS.get(state, state))
        self._written = LoopStatus(state, detail, now, held.since,
                                   revision=self.svc.config.revision)
        await write_status(self.svc.redis, keys.UPDATES_STATUS, keys.UPDATES_STATUS_TTL_S,
                           self._written)
        if state != "unauthorized" and self._refused_token is not None:
            self._refused_token = None


async def run_poller(svc: Services) -> None:
    """The app's background loop (`runtime.background`)."""
    await Poller(svc).run()
