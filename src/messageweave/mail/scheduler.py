"""Built-in scheduling (reference §7: built-in schedule): periodic reconcile passes, push
catch-ups, the push lifecycle, orphan sweeps.

Every instance runs this loop for each account it serves (`runtime.run_accounts`), in the
account's keys (`svc.keys`: its slots and catch-up flags; the PushSubscription's maintenance and
orphan sweep are `default`'s only, reference §7.16); Redis decides which instance acts:
- a periodic pass runs on the instance whose `SET schedule:reconcile NX EX interval` wins, once
  per `reconcile_interval_s` cluster-wide (0 = no built-in schedule, external cron only);
- while push is degraded (`push.assess`), a pass also runs once per
  `degraded_reconcile_interval_s` (slot `schedule:reconcile-degraded`), whatever
  `reconcile_interval_s` says, 0 included: mail must not wait for a push that will not come;
- a StateChange push sets `reconcile:catchup:{account}`; the instance that `GETDEL`s it runs one
  pass at once. A newly set flag wakes the schedulers (`store.catchup.announce_catchup`): this
  instance's directly, the others' through `PUBLISH reconcile:catchup-wake`; the flag is still
  polled every `POLL_S`, so a lost signal delays a pass but never loses it. Many pushes → one
  pending flag → one pass; a push during a pass → exactly one pass after it (the wake is
  cleared before the flag is taken). Push-triggered catch-ups start at most once per
  `PUSH_CATCHUP_INTERVAL_S` (issue #23): a push inside the interval is deferred, and the
  first tick after the interval (`push.release_deferred`, at `clock()`) flags it; the instance
  that deferred it wakes its scheduler at the interval's end, not at the next poll. If another
  pass holds `lock:reconcile`, the flag is set again (no signal) and retried at the next poll;
- while a push registration exists, `push.maintain` runs once per
  `PUSH_MAINTENANCE_INTERVAL_S` (slot `schedule:push-maintenance`; the first pass within a
  second of the registration appearing): check, renew or re-create the subscription;
- `push:orphan:*` is swept every `ORPHAN_SWEEP_INTERVAL_S` the same way;
- when an instance starts (its first tick with a connected JMAP client) and the built-in
  schedule is on, the periodic pass runs at once, or a catch-up when a stopped instance's slot
  is still running out, so mail that arrived while the service was down does not wait for the
  next periodic pass (issue #22). "Degraded" is the push in force (`eventsource.in_force`):
  EventSource or PushSubscription, under `push_mode`.
Nothing runs while the service switch is off or no configuration is live. `clock` (Unix
seconds) is what the push lifecycle calls "now"; tests pass their own.

A failure (a pass, the push maintenance's JMAP client, the orphan sweep, a tick's Redis) is
logged through `_Timers.failures` (`logs.RepeatLog`): class, reason and what to check, once a
minute per place and class with a count, and one line on recovery.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from messageweave.aio import cancel, every, raise_if_cancelling
from messageweave.config.live import NotConfigured
from messageweave.config.model import BusinessConfig
from messageweave.logs import RepeatLog
from messageweave.mail import push
from messageweave.mail.context import MailContext
from messageweave.mail.errors import MailError
from messageweave.mail.eventsource import read_in_force
from messageweave.mail.jmap import JmapClient, JmapError
from messageweave.mail.kinds import kind_of
from messageweave.mail.passes import (
    Budget,
    Progress,
    ProgressCallback,
    ReconcileBusy,
    ReconcileError,
)
from messageweave.store import keys
from messageweave.store.catchup import catchup_wakes, request_catchup, take_catchup, watch_catchups
from messageweave.store.locks import LockLost
from messageweave.store.push import current_registration
from messageweave.store.reconcile_state import claim_slot, slot_free
from messageweave.store.together import on_grid

log = logging.getLogger(__name__)

# The catch-up flag's poll: a safety net only, since a new flag wakes the schedulers at once
# (`catchup_wakes`: this instance's directly, the others' through the subscription, which wakes
# them all when it is made again), so only a signal lost on a live subscription waits for it.
# 0.2 s per account was most of an idle instance's CPU, 2 s still a quarter of its Redis round
# trips (issue #37).
POLL_S = 10.0
# The same while the account cannot act yet (no configuration, not live, switched off, its mail
# client not connected): what it waits for sends no announcement.
WAITING_S = 2.0
RETRY_S = 0.2  # a catch-up refused while another pass held the lock is tried again this soon
# The slots are checked every quarter of the shortest interval they serve, between these bounds
# (15 s with the default 60 s intervals: a push that degrades is backed up within 15 s; every
# tenth within 1–5 s was a fifth of an idle account's Redis round trips, issue #37);
# `default` (the webhook's maintenance, the orphan sweep) every SLOT_CHECK_S.
SLOT_CHECK_S = 1.0
SLOT_CHECK_MAX_S = 15.0
SLOT_CHECKS_PER_INTERVAL = 4
# The places of the failure lines (`RepeatLog`); a pass's is "<kind> reconcile".
TICK = "scheduler tick"
SWEEP = "orphan push subscription sweep"
MAINTENANCE_CLIENT = "push maintenance's JMAP client"


async def run_pass(
    svc: MailContext, *, budget: Budget | None = None, on_progress: ProgressCallback | None = None,
    source: str = "reconcile",
) -> Progress:
    """One catch-up pass of the live source (`MailWatch.catch_up`) with the live configuration
    (ReconcileBusy, MailError, RedisError, NotConfigured, ReconcileError and LockLost
    propagate); its new mails count as ingested from `source`."""
    cfg = svc.config.config
    if cfg is None:
        raise NotConfigured
    watch = await svc.watch()
    return await watch.catch_up(svc.redis, cfg.notify_mailbox_roles, budget=budget,
                                on_progress=on_progress, digest_threshold=cfg.digest_threshold,
                                source=source, names=svc.keys)


def _now() -> float:
    """The event loop's clock: the schedulers' polls and slot checks are on its grid
    (`store.together.on_grid`), so those of every account come in one turn of the loop and
    their Redis commands in one round trip."""
    return asyncio.get_running_loop().time()


@dataclass
class _Timers:
    next_slot_check: float = 0.0
    next_poll: float = 0.0  # the flag's poll, or a refused catch-up's retry
    watched: str | None = None  # the mail account whose announcements wake it (None: any)
    periodic_ends: float = 0.0  # when the periodic slot ends (monotonic), as last claimed
    slot_revision: int = -1  # the configuration's revision when it was claimed
    started: bool = False  # the start-up catch-up was asked for
    failures: RepeatLog = field(default_factory=lambda: RepeatLog(log))


async def run_scheduler(svc: MailContext, *, clock: push.Clock = time.time) -> None:
    """Run the built-in schedule until cancelled (started by the app lifespan): a tick when
    its next slot check or flag poll is due (`POLL_S`), and one at once whenever a catch-up
    is announced."""
    timers = _Timers()
    wake = asyncio.Event()
    wake.set()  # the first tick at once
    async with catchup_wakes(svc.redis, wake):  # one subscription for all the accounts
        await every(0, lambda: _woken_tick(svc, timers, clock, wake), log, "scheduler tick")


async def _woken_tick(svc: MailContext, timers: _Timers, clock: push.Clock,
                      wake: asyncio.Event) -> None:
    due = min(timers.next_poll, timers.next_slot_check)
    changed = await _woken(svc, wake, max(0.0, due - _now()))
    if changed:
        timers.next_slot_check = 0.0  # a new configuration: its intervals, at once
    # The flag is taken when announced or polled for, not on a tick for the slots alone.
    take = changed or wake.is_set() or _now() >= timers.next_poll
    wake.clear()  # before the tick: an announcement during it wakes the next one
    if take:
        timers.next_poll = _now() + on_grid(POLL_S)
    if svc.live_account != timers.watched:  # woken by its own account's pushes alone
        timers.watched = svc.live_account
        watch_catchups(svc.redis, wake, timers.watched or "")
    try:
        await _tick(svc, timers, clock, take=take)
    except Exception as exc:  # Redis down: every POLL_S, so counted, not logged each time
        raise_if_cancelling()
        timers.failures.failed(TICK, exc)
    else:
        timers.failures.recovered(TICK)
    if timers.next_slot_check <= _now():  # not checked (no configuration, paused…)
        timers.next_slot_check = timers.next_poll


async def _woken(svc: MailContext, wake: asyncio.Event, within: float) -> bool:
    """Wait up to `within` seconds for an announcement or a new configuration (a first one,
    a changed interval: the next tick must not wait for the flag's poll); True for the
    latter."""
    if wake.is_set() or within <= 0:
        return False
    announced = asyncio.ensure_future(wake.wait())
    changed = asyncio.ensure_future(svc.config.changed_within(within))
    try:
        await asyncio.wait([announced, changed], return_when=asyncio.FIRST_COMPLETED)
    finally:
        await cancel(announced)
        await cancel(changed)
    return not changed.cancelled() and changed.result()


async def _tick(svc: MailContext, timers: _Timers, clock: push.Clock, *,
                take: bool = True) -> None:
    cfg = svc.config.config
    if cfg is None or not svc.live or not await svc.store.switched_on():
        timers.next_poll = _now() + WAITING_S
        return
    names, webhook = svc.keys, svc.keys == keys.DEFAULT  # see `_tick_webhook`
    if svc.live_account is None and not webhook and kind_of(cfg).jmap_session:
        await _jmap_or_none(svc, timers)  # another account connects on first use: now
    account = svc.live_account
    if account is None:
        timers.next_poll = _now() + WAITING_S
    else:
        if not timers.started:
            timers.started = True
            await _start_pass(svc, cfg, account)
        if webhook:
            await push.release_deferred(svc.redis, account, now=clock())
        if take and await take_catchup(svc.redis, account, names=names):
            if not await _pass(svc, "catch-up", timers):
                await request_catchup(svc.redis, account, names=names)
                timers.next_poll = _now() + RETRY_S
            return
    now = _now()
    if now < timers.next_slot_check:
        return
    timers.next_slot_check = now + on_grid(_slot_gap(cfg, webhook))
    if webhook:
        await _tick_webhook(svc, timers, clock)
    degraded = (await read_in_force(svc.redis, cfg, clock(), names=names)).state == "degraded"
    periodic = await _periodic_due(svc, cfg, timers)
    if cfg.reconcile_interval_s > 0:  # the next periodic pass on time, not a check later
        timers.next_slot_check = min(timers.next_slot_check, timers.periodic_ends)
    backup = degraded and (await claim_slot(
        svc.redis, names.of(keys.PUSH_DEGRADED_RECONCILE_SCHEDULE),
        cfg.degraded_reconcile_interval_s)).claimed
    if periodic or backup:
        await _pass(svc, "periodic" if periodic else "degraded-push", timers)
    if webhook:
        await _sweep(svc, cfg, timers)


async def _periodic_due(svc: MailContext, cfg: BusinessConfig, timers: _Timers) -> bool:
    """Whether this instance runs the periodic pass now (it claimed the slot). The slot is
    not asked for again before it ends (`SlotClaim.left_s`), unless the configuration changed
    meanwhile (a lowered interval cuts it): one claim per interval, not one per slot check."""
    interval = cfg.reconcile_interval_s
    now = _now()
    if interval <= 0 or (timers.slot_revision == svc.config.revision
                         and now < timers.periodic_ends):
        return False
    claim = await claim_slot(svc.redis, svc.keys.of(keys.RECONCILE_SCHEDULE), interval)
    timers.slot_revision, timers.periodic_ends = svc.config.revision, now + claim.left_s
    return claim.claimed


def _slot_gap(cfg: BusinessConfig, webhook: bool) -> float:
    """How long until the next slot check: a quarter of the shortest interval it serves (the
    degraded-push backup's always: push may degrade at any time), within `SLOT_CHECK_S` and
    `SLOT_CHECK_MAX_S`; `default`'s every `SLOT_CHECK_S` (its push maintenance)."""
    if webhook:
        return SLOT_CHECK_S
    intervals = [cfg.degraded_reconcile_interval_s,
                 *([cfg.reconcile_interval_s] if cfg.reconcile_interval_s > 0 else [])]
    gap = min(intervals) / SLOT_CHECKS_PER_INTERVAL
    return min(SLOT_CHECK_MAX_S, max(SLOT_CHECK_S, gap))


async def _tick_webhook(svc: MailContext, timers: _Timers, clock: push.Clock) -> None:
    """The PushSubscription's maintenance: `default`'s only, the one account with a webhook
    push (reference §7.16; another account's `subscription` mode is `auto`,
    `eventsource.push_mode_of`)."""
    if await current_registration(svc.redis) is not None and (await claim_slot(
        svc.redis, keys.PUSH_MAINTENANCE_SCHEDULE, keys.PUSH_MAINTENANCE_INTERVAL_S
    )).claimed:
        outcome = await push.maintain(svc.redis, await _jmap_or_none(svc, timers),
                                      now=clock())
        if outcome not in ("ok", "off"):
            log.info("push maintenance: %s", outcome)


async def _sweep(svc: MailContext, cfg: BusinessConfig, timers: _Timers) -> None:
    """`default`'s orphaned PushSubscriptions, swept once per `ORPHAN_SWEEP_INTERVAL_S`."""
    if kind_of(cfg).push_subscriptions and (await claim_slot(
            svc.redis, keys.ORPHAN_SWEEP_SCHEDULE, keys.ORPHAN_SWEEP_INTERVAL_S)).claimed:
        try:
            cleaned = await push.sweep_orphans(svc.redis, await svc.jmap())
        except (NotConfigured, JmapError) as exc:
            timers.failures.failed(SWEEP, exc)
            return
        timers.failures.recovered(SWEEP)
        if cleaned:
            log.info("swept %d orphaned push subscription(s)", cleaned)


async def _start_pass(svc: MailContext, cfg: BusinessConfig, account: str) -> None:
    """Mail that came while no instance ran goes out now, not a periodic interval later: with
    the built-in schedule on, the periodic slot is taken at once, or (when the slot of a
    stopped instance is still running out) a catch-up is asked for. With `reconcile_interval_s`
    0 the operator's cron decides (a connected EventSource asks for its own)."""
    if cfg.reconcile_interval_s <= 0:
        return
    if not await slot_free(svc.redis, svc.keys.of(keys.RECONCILE_SCHEDULE)):
        await request_catchup(svc.redis, account, names=svc.keys)


async def _jmap_or_none(svc: MailContext, timers: _Timers) -> JmapClient | None:
    try:
        client = await svc.jmap()
    except (NotConfigured, JmapError) as exc:
        timers.failures.failed(MAINTENANCE_CLIENT, exc)
        return None
    timers.failures.recovered(MAINTENANCE_CLIENT)
    return client


async def _pass(svc: MailContext, kind: str, timers: _Timers) -> bool:
    """Run one pass; False when it must be retried (another pass held the lock)."""
    place = f"{kind} reconcile"
    try:
        result = await run_pass(svc, source="jmap_push" if kind == "catch-up" else "reconcile")
    except ReconcileBusy:
        return False
    except (ReconcileError, LockLost, MailError, NotConfigured) as exc:
        timers.failures.failed(place, exc)
        return True
    timers.failures.recovered(place)
    if result.enqueued:
        log.info("%s reconcile enqueued %d new mail(s)", kind, result.enqueued)
    return True
