"""The watching side of a mail source: what the scheduler, `POST /reconcile`, `messageweave
reconcile` and the gap auditor need, whatever the server speaks.

`catch_up` is one pass "new mail since the cursor": under `lock:reconcile`, every new mail of
the notify mailboxes claimed once and enqueued on `stalwart:jmap` (or held into a digest entry),
the cursor — opaque to every caller — saved only after what it covers is enqueued; the first
pass records the cursor and notifies nothing. `audit` lists the audit window's mail and
re-enqueues what no entry accounts for. `mail.jmap_watch.JmapWatch` is the JMAP one
(`Email/changes` and `Email/query`); `services.Peers.watch` builds the one in force.

What stays JMAP's own, behind `MailContext.jmap()`: the push that asks for a catch-up
(PushSubscription, `mail.push`; EventSource, `mail.eventsource`) and which one is in force
(`mail.eventsource.in_force`). An IDLE holder is the same kind of thing for IMAP: it asks for
a catch-up (`store.catchup.request_catchup`) and the pass does the rest.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from messageweave.mail.passes import AuditResult, Budget, Progress, ProgressCallback
from messageweave.store import keys
from messageweave.store.keys import AccountKeys
from messageweave.store.redis import Redis


class MailWatch(Protocol):
    async def catch_up(self, redis: Redis, roles: Iterable[str], *, budget: Budget | None = None,
                       on_progress: ProgressCallback | None = None, digest_threshold: int = 0,
                       source: str = "reconcile",
                       names: AccountKeys = keys.DEFAULT) -> Progress:
        """One pass, in the account whose keys are `names` (`ReconcileBusy` when another holds
        the lock; `MailError`, `RedisError`, `ReconcileError` and `store.locks.LockLost`
        propagate, the cursor kept). Its new mails count as ingested from `source`."""

    async def audit(self, redis: Redis, roles: Iterable[str], window_s: int, *,
                    names: AccountKeys = keys.DEFAULT) -> AuditResult:
        """One gap audit of the last `window_s` seconds, in the account whose keys are `names`
        (`MailError` and `RedisError` propagate)."""
