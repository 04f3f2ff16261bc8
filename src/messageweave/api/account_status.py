"""`GET /api/accounts/{id}/status` (SPEC G.3): what one account's mailbox and queue look like.

The mail server's check is `/ready`'s (`probes.mail_probe`, shared and cached per account as
`probes.Shared` does for `/ready`). Until the runtime serves the accounts other than `default`
(reference §7.16) only `default` has a push, a queue and notifications to report; the others
answer `push` `off`, 0 and null.
"""

from __future__ import annotations

import time

from fastapi import Request

from messageweave.api.credentials import services
from messageweave.config.accounts import Account
from messageweave.mail.eventsource import read_in_force
from messageweave.ops.sendlog import Outcome
from messageweave.probes import ProbeFailure, Shared, guarded, mail_probe, probe_ttl
from messageweave.services import Services
from messageweave.store import keys
from messageweave.store.oplog import send_log
from messageweave.store.streams import StreamStore

PAUSED = "fail: paused"


def _probe_of(request: Request, account_id: str) -> Shared[ProbeFailure | None]:
    """The account's shared mail probe on this instance, made on first use (one event loop:
    no race). A deleted account's stays until the process ends: one small object per id."""
    probes: dict[str, Shared[ProbeFailure | None]] | None = getattr(request.app.state,
                                                           "account_probes", None)
    if probes is None:
        probes = request.app.state.account_probes = {}
    return probes.setdefault(account_id, Shared(probe_ttl))


async def _mail(request: Request, account: Account) -> str:
    if not account.enabled:  # a paused account opens no connection to its mail server
        return PAUSED
    _check, probe = mail_probe(account.config)
    failure = await _probe_of(request, account.id).get(
        account.revision, lambda: guarded(probe, account.config))
    return "ok" if failure is None else f"fail: {failure.kind}"  # the class (`probes.KINDS`)


async def _last_notified_at(svc: Services) -> str | None:
    page = await send_log(svc.redis).page(
        None, 1, lambda r: r.get("stream") == keys.STREAM_JMAP
        and r.get("outcome") == Outcome.DELIVERED)
    return str(page.records[0]["time"]) if page.records else None


async def account_status(request: Request, account: Account) -> dict[str, object]:
    svc = services(request)
    body: dict[str, object] = {"id": account.id, "enabled": account.enabled,
                               "mail": await _mail(request, account), "push": "off",
                               "waiting": 0, "dlq": 0, "last_notified_at": None}
    if account.id == keys.DEFAULT_ACCOUNT:
        enabled = await svc.store.enabled()
        force = await read_in_force(svc.redis, account.config, time.time(), enabled=enabled)
        stats = await StreamStore(svc.redis).stats(keys.STREAM_JMAP)
        body.update(push=force.label, waiting=stats["unread"] + stats["pending"],
                    dlq=stats["dlq"], last_notified_at=await _last_notified_at(svc))
    return body
