"""Reply drafts not sent within a day are destroyed (issue #25), each served account's in its
own mailbox (issue #35): a loop of the serving instance (`runtime.background`), beside the
worker rather than inside it, since it calls mailboxes, which must not hold up the worker's
recovery. The expiry of one account's drafts is `pipeline.reply.expire_drafts`."""

from __future__ import annotations

import logging
import time

from messageweave.aio import every
from messageweave.pipeline.reply import expire_drafts
from messageweave.services import Services

log = logging.getLogger(__name__)

DRAFT_EXPIRY_INTERVAL_S = 60.0


async def expire_every_account(svc: Services, now: float) -> None:
    """Every served account's drafts older than a day at `now`, each in its own mailbox."""
    for account in svc.accounts.served():
        view = svc.for_account(account)
        await expire_drafts(view.redis, view.keys, view.mail, now=now)


async def run_draft_expiry(svc: Services) -> None:
    """`expire_every_account` every `DRAFT_EXPIRY_INTERVAL_S` until stopped; a failed pass is
    logged and the next one tries again (a mailbox out of reach puts its drafts back)."""
    await every(DRAFT_EXPIRY_INTERVAL_S, lambda: expire_every_account(svc, time.time()), log,
                "reply draft expiry")
