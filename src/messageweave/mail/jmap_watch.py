"""`MailWatch` over JMAP: the catch-up is the reconcile (`Email/changes`, `mail.reconcile`),
the audit's listing an `Email/query` (`mail.gap_audit`). A thin adapter: it lives outside
`mail/jmap/` because those modules import the client."""

from __future__ import annotations

from collections.abc import Iterable

from messageweave.mail import gap_audit, reconcile
from messageweave.mail.jmap import JmapClient
from messageweave.mail.passes import AuditResult, Budget, Progress, ProgressCallback
from messageweave.store import keys
from messageweave.store.keys import AccountKeys
from messageweave.store.redis import Redis


class JmapWatch:
    def __init__(self, client: JmapClient) -> None:
        self.client = client

    async def catch_up(self, redis: Redis, roles: Iterable[str], *, budget: Budget | None = None,
                       on_progress: ProgressCallback | None = None, digest_threshold: int = 0,
                       source: str = "reconcile",
                       names: AccountKeys = keys.DEFAULT) -> Progress:
        return await reconcile.reconcile(redis, self.client, roles, budget=budget,
                                         on_progress=on_progress,
                                         digest_threshold=digest_threshold, source=source,
                                         names=names)

    async def audit(self, redis: Redis, roles: Iterable[str], window_s: int, *,
                    names: AccountKeys = keys.DEFAULT) -> AuditResult:
        return await gap_audit.audit(redis, self.client, roles, window_s, names=names)
