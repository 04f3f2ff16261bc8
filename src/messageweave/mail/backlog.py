"""A catch-up pass's new mails on their way to `stalwart:jmap` (reference §7.7), whatever the
source: the JMAP reconcile (`mail.reconcile`) and the IMAP catch-up (`mail.imap.catchup`) both
hand them to one `Backlog`.

Without the backlog digest (`threshold` 0) each mail is claimed and enqueued as it comes
(`store.mail_entries.enqueue_new_mails`). With it, the pass's mails are held until `release`: more
than `threshold` (or any after a digest entry of this pass) go out as digest entries, fewer one
entry each. A pass holds at most 2 × `DIGEST_MAX_IDS` ids: beyond that a full digest entry goes
out at once, and the release splits what is held in two, so every entry of a split pass holds
more than `DIGEST_THRESHOLD_MAX` mails. While mails are held (`holding`), the pass must not save
a cursor past them: it holds its cursor back and saves it after `release`.
"""

from __future__ import annotations

from typing import Protocol

from messageweave.store.keys import AccountKeys
from messageweave.store.mail_entries import DIGEST_MAX_IDS, enqueue_digest, enqueue_new_mails
from messageweave.store.redis import Redis


class Counts(Protocol):
    """Where a pass reports what it enqueued (`mail.passes.Progress` and the IMAP one)."""

    enqueued: int
    digests: int


class Backlog:
    def __init__(self, redis: Redis, account: str, threshold: int, counts: Counts,
                 names: AccountKeys) -> None:
        self.redis, self.account, self.names = redis, account, names
        self.threshold = max(0, threshold)
        self.counts = counts  # counted as each entry goes out: a failing pass reports them too
        self._held: list[str] = []
        self._digested = False

    @property
    def holding(self) -> bool:
        return bool(self._held)

    async def add(self, email_ids: list[str]) -> None:
        if not self.threshold:
            self.counts.enqueued += await enqueue_new_mails(self.redis, self.account, email_ids,
                                                            names=self.names)
            return
        self._held += email_ids
        while len(self._held) >= 2 * DIGEST_MAX_IDS:
            await self._digest(self._held[:DIGEST_MAX_IDS])
            del self._held[:DIGEST_MAX_IDS]

    async def release(self) -> None:
        """Enqueue what is held (module docstring)."""
        held, self._held = self._held, []
        if len(held) > DIGEST_MAX_IDS:  # a split pass: two halves, each above any threshold
            half = (len(held) + 1) // 2
            await self._digest(held[:half])
            await self._digest(held[half:])
        elif held and (len(held) > self.threshold or self._digested):
            await self._digest(held)
        elif held:
            self.counts.enqueued += await enqueue_new_mails(self.redis, self.account, held,
                                                            names=self.names)

    async def _digest(self, email_ids: list[str]) -> None:
        entry, count = await enqueue_digest(self.redis, self.account, email_ids,
                                            names=self.names)
        self._digested = True
        self.counts.enqueued += count
        self.counts.digests += entry is not None
