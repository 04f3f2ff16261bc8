"""`GET /api/accounts/{id}/status` (SPEC G.3): what one account's mailbox and queue look like.

The mail server's check is `/ready`'s (`probes.mail_probe`, shared and cached per account as
`probes.Shared` does for `/ready`). The queue, the notifications and the push are the account's own
(its stream, its holder's status; a paused account's push is `off`).
"""

from __future__ import annotations

import asyncio
import time
from functools import partial

from fastapi import Request

from messageweave.api.credentials import services
from messageweave.config.accounts import Account, chats_of
from messageweave.config.model import BusinessConfig
from messageweave.mail.eventsource import PushInForce, read_in_force
from messageweave.ops.sendlog import Outcome
from messageweave.probes import ProbeFailure, Shared, guarded, mail_probe, probe_ttl
from messageweave.services import AccountRuntime, Services
from messageweave.store.keys import DEFAULT_ACCOUNT, AccountKeys
from messageweave.store.oplog import iso_time, send_log
from messageweave.store.streams import STREAM_NAMES, StreamStore

PAUSED = "fail: paused"


def _probe_of(request: Request, account_id: str) -> Shared[ProbeFailure | None]:
    """The account's shared mail probe on this instance, made on first use (one event loop:
    no race). A deleted account's stays until the process ends: one small object per id."""
    probes: dict[str, Shared[ProbeFailure | None]] | None = getattr(request.app.state,
                                                           "account_probes", None)
    if probes is None:
        probes = request.app.state.account_probes = {}
    return probes.setdefault(account_id, Shared(probe_ttl))


async def _mail_failure(request: Request, account_id: str, revision: int,
                        config: BusinessConfig) -> ProbeFailure | None:
    """The account's mail check (`/ready`'s), shared and cached per account and revision: what
    its status and `/ready`'s failing accounts both read."""
    _check, probe = mail_probe(config)
    return await _probe_of(request, account_id).get(revision, partial(guarded, probe, config))


async def _mail(request: Request, account: Account) -> str:
    if not account.enabled:  # a paused account opens no connection to its mail server
        return PAUSED
    failure = await _mail_failure(request, account.id, account.revision, account.config)
    return "ok" if failure is None else f"fail: {failure.kind}"  # the class (`probes.KINDS`)


async def failing_accounts(request: Request, accounts: list[AccountRuntime]) -> list[str]:
    """The served accounts whose mail server fails its check (`/ready` with several accounts,
    SPEC G.3), each probed as its status does (`_mail_failure`)."""
    served = [a for a in accounts if a.enabled]
    failures = await asyncio.gather(*(
        _mail_failure(request, a.id, a.revision, a.config) for a in served))
    return [a.id for a, failure in zip(served, failures, strict=True) if failure is not None]


async def default_push(svc: Services, now: float) -> PushInForce:
    """`default`'s push in force as `/ready`, `/metrics` and `/api/push/status` report it:
    `off` while processing is switched off or `default` is paused, as this instance's registry
    last read it (a pause is seen within one refresh, `RELOAD_INTERVAL_S`). A paused account's
    holders do not run, so its push is `off` at once, as its status says, not what its holder
    last wrote (kept up to the status's TTL, then read as `degraded`). `RedisError` passes."""
    default = svc.accounts.get(DEFAULT_ACCOUNT)
    served = default is None or default.enabled
    return await read_in_force(svc.redis, svc.config.config, now,
                               enabled=served and await svc.store.enabled())


async def _last_notified_at(svc: Services, account: Account) -> str | None:
    """The newest notification of the account's mail delivered (`AccountKeys.last_notified`,
    written with its send record). Before that key was written (a send of an older release),
    the newest such record in the send log: one naming the account, or, written before records
    named it, one to one of its chats (a bounded scan, `OpLog.page`)."""
    stamp = await svc.redis.get(AccountKeys(account.id).last_notified)
    if stamp is not None:
        return iso_time(int(stamp))
    chats = set(chats_of(account.config))

    def mine(r: dict[str, object]) -> bool:
        owner = r.get("account")
        return r.get("stream") == STREAM_NAMES[0] and r.get("outcome") == Outcome.DELIVERED \
            and (owner == account.id if owner is not None else r.get("chat_id") in chats)
    page = await send_log(svc.redis).page(None, 1, mine)
    return str(page.records[0]["time"]) if page.records else None


async def account_status(request: Request, account: Account) -> dict[str, object]:
    svc = services(request)
    body: dict[str, object] = {"id": account.id, "enabled": account.enabled,
                               "mail": await _mail(request, account), "push": "off",
                               "waiting": 0, "dlq": 0, "last_notified_at": None}
    stream = AccountKeys(account.id).stream_jmap
    stats = await StreamStore(svc.redis).stats(stream)
    body.update(waiting=stats["unread"] + stats["pending"], dlq=stats["dlq"],
                last_notified_at=await _last_notified_at(svc, account))
    if account.enabled:  # a paused account's holders do not run: its push is `off`
        enabled = await svc.store.enabled()
        force = await read_in_force(svc.redis, account.config, time.time(), enabled=enabled,
                                    names=AccountKeys(account.id))
        body.update(push=force.label)
    return body
