"""Built-in scheduling (SPEC D.4): periodic reconcile passes, push catch-ups, orphan sweeps.

Every instance runs this loop; Redis decides which one acts:
- a periodic pass runs on the instance whose `SET schedule:reconcile NX EX interval` wins, once
  per `reconcile_interval_s` cluster-wide (0 = no built-in schedule, external cron only);
- a StateChange push sets `reconcile:catchup:{account}`; the instance that `GETDEL`s it runs one
  pass at once (polled every `POLL_S`, so well within 1 s). Many pushes → one pending flag → one
  pass. If another pass holds `lock:reconcile`, the flag is set again and retried;
- `push:orphan:*` is swept every `ORPHAN_SWEEP_INTERVAL_S` the same way.
Nothing runs while the service switch is off or no configuration is live.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from messageweave.aio import raise_if_cancelling
from messageweave.api.services import Services
from messageweave.config.service import NotConfigured
from messageweave.mail import push
from messageweave.mail.jmap import JmapError
from messageweave.mail.reconcile import (
    Budget,
    Progress,
    ProgressCallback,
    ReconcileBusy,
    ReconcileError,
    reconcile,
)
from messageweave.store import keys
from messageweave.store.mailbox import claim_slot, request_catchup, take_catchup

log = logging.getLogger(__name__)

POLL_S = 0.2
SLOT_CHECK_S = 1.0


async def run_pass(
    svc: Services, *, budget: Budget | None = None, on_progress: ProgressCallback | None = None
) -> Progress:
    """One reconcile pass with the live configuration (ReconcileBusy, JmapError, RedisError,
    NotConfigured and ReconcileError propagate)."""
    cfg = svc.config.config
    if cfg is None:
        raise NotConfigured
    client = await svc.config.jmap()
    return await reconcile(svc.redis, client, cfg.notify_mailbox_roles, budget=budget,
                           on_progress=on_progress)


@dataclass
class _Clock:
    next_slot_check: float = 0.0


async def run_scheduler(svc: Services) -> None:
    """Run periodic reconcile passes until cancelled (started by the app lifespan)."""
    clock = _Clock()
    while True:
        try:
            await _tick(svc, clock)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a Redis or JMAP hiccup must never stop the loop
            raise_if_cancelling()
            log.warning("scheduler tick failed: %s", type(exc).__name__)
        raise_if_cancelling()
        await asyncio.sleep(POLL_S)


async def _tick(svc: Services, clock: _Clock) -> None:
    cfg, runtime = svc.config.config, svc.config.runtime
    if cfg is None or runtime is None or not await svc.store.enabled():
        return
    client = runtime.jmap
    if client is not None and client.session is not None:
        account = client.account_id
        if await take_catchup(svc.redis, account):
            if not await _pass(svc, "catch-up"):
                await request_catchup(svc.redis, account)
            return
    now = time.monotonic()
    if now < clock.next_slot_check:
        return
    clock.next_slot_check = now + SLOT_CHECK_S
    interval = cfg.reconcile_interval_s
    if interval > 0 and await claim_slot(svc.redis, keys.RECONCILE_SCHEDULE, interval):
        await _pass(svc, "periodic")
    if await claim_slot(svc.redis, keys.ORPHAN_SWEEP_SCHEDULE, keys.ORPHAN_SWEEP_INTERVAL_S):
        cleaned = await push.sweep_orphans(svc.redis, await svc.config.jmap())
        if cleaned:
            log.info("swept %d orphaned push subscription(s)", cleaned)


async def _pass(svc: Services, kind: str) -> bool:
    """Run one pass; False when it must be retried (another pass held the lock)."""
    try:
        result = await run_pass(svc)
    except ReconcileBusy:
        return False
    except (ReconcileError, JmapError, NotConfigured) as exc:
        log.warning("%s reconcile failed: %s", kind, type(exc).__name__)
        return True
    if result.enqueued:
        log.info("%s reconcile enqueued %d new mail(s)", kind, result.enqueued)
    return True
