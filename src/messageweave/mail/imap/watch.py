"""`MailWatch` over IMAP (issue #33; SPEC Part F.2): the catch-up is `mail.imap.catchup` and the
gap audit lists the notify mailboxes' mail of the audit window with `UID SEARCH SINCE`.

Each pass or audit opens its own connection (`connect`) and logs out at its end: the IDLE
holder's connections (`mail.imap.idle`) only listen. The notify mailboxes are the
configuration's `imap_notify_mailboxes` (the `roles` a caller passes are JMAP's and are not
used); the account is the IMAP user name. The IMAP client's errors are the source-neutral
`mail.errors` ones already (`mail.imap.errors`), so the scheduler, `POST /reconcile` and the
auditor never ask which source they have.

The audit, as the JMAP one (`mail.gap_audit`):
1. nothing before the catch-up's first pass (no `state:imap:cursor`); `since = max(baseline,
   now - window_s)`, the baseline `state:jmap:baseline_at` that the first pass records;
2. per notify mailbox, `UID SEARCH SINCE` the day before `since`, INTERNALDATE fetched and
   compared (strictly after `since`), newest first, at most `AUDIT_MAX_EMAILS`;
3. mail the catch-up has not reached (a UID above the mailbox's cursor, or, when the
   UIDVALIDITY changed or the mailbox has no cursor yet, anything after the watermark) is
   `undiscovered`, the catch-up's to enqueue; every other listed mail is checked against the
   ledger and re-enqueued once when nobody owns it (`mail.gap_audit.check`,
   `store.gaps.check_and_claim`).
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

from messageweave.config.model import BusinessConfig
from messageweave.config.outbound import OutboundConfig
from messageweave.mail import gap_audit
from messageweave.mail.imap.catchup import (
    CatchupBusy,
    CatchupProgress,
    Cursor,
    catch_up,
    read_cursors,
    read_watermark,
)
from messageweave.mail.imap.client import ImapClient
from messageweave.mail.imap.ids import mail_id
from messageweave.mail.passes import (
    AuditResult,
    Budget,
    Progress,
    ProgressCallback,
    ReconcileBusy,
)
from messageweave.store import gaps, keys
from messageweave.store.keys import AccountKeys
from messageweave.store.redis import Redis

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
FETCH_PAGE = 500


def new_imap_client(cfg: BusinessConfig, outbound: OutboundConfig) -> ImapClient:
    """A client of the configured IMAP server (not connected; `ValueError` for a trust store
    that cannot be loaded or `none` security to a host that is not loopback)."""
    return ImapClient(cfg.imap_host, cfg.imap_port, username=cfg.imap_username,
                      password=cfg.imap_password, security=cfg.imap_security,
                      ca_pem=cfg.imap_ca_pem, timeout=outbound.jmap_timeout_ms / 1000)


def since_day(ts: int) -> str:
    """The `SINCE` date (day-granular, in the server's zone) that surely covers `ts`: the day
    before `ts`'s UTC day."""
    day = dt.datetime.fromtimestamp(ts, dt.UTC) - dt.timedelta(days=1)
    return f"{day.day}-{_MONTHS[day.month - 1]}-{day.year}"


def progress_of(done: CatchupProgress) -> Progress:
    return Progress(phase="first_run" if done.first_runs else "done", emails=done.enqueued,
                    enqueued=done.enqueued, digests=done.digests,
                    rebaselined=bool(done.rebaselined), complete=done.complete)


@dataclass(frozen=True)
class _Listed:
    id: str
    received_at: int
    undiscovered: bool


class ImapWatch:
    """The watching side of one IMAP account: `connect()` gives a logged-in client for one
    pass (a new one, or the one `source.ImapSource.for_pass` keeps: issue #37)."""

    def __init__(self, connect: Callable[[], AbstractAsyncContextManager[ImapClient]],
                 mailboxes: Sequence[str],
                 account: str) -> None:
        self.connect = connect
        self.mailboxes = list(dict.fromkeys(mailboxes))
        self.account = account

    async def catch_up(self, redis: Redis, roles: Iterable[str], *, budget: Budget | None = None,
                       on_progress: ProgressCallback | None = None, digest_threshold: int = 0,
                       source: str = "reconcile",
                       names: AccountKeys = keys.DEFAULT) -> Progress:
        seconds = (budget or Budget()).seconds
        try:
            async with self.connect() as client:
                done = await catch_up(redis, client, self.mailboxes, self.account,
                                      digest_threshold=digest_threshold, seconds=seconds,
                                      source=source, names=names)
        except CatchupBusy as exc:
            raise ReconcileBusy(str(exc)) from exc
        progress = progress_of(done)
        if on_progress is not None:
            on_progress(progress)
        return progress

    async def audit(self, redis: Redis, roles: Iterable[str], window_s: int, *,
                    max_emails: int = gap_audit.AUDIT_MAX_EMAILS,
                    names: AccountKeys = keys.DEFAULT) -> AuditResult:
        now = time.time()
        result = AuditResult(at=int(now))
        if not await read_cursors(redis, names):
            return result  # no first pass yet: nothing was meant to be notified
        baseline = (await gaps.read_state(redis, names)).baseline
        if baseline is None:
            baseline = await gaps.start_baseline(redis, math.ceil(now), names)
            result.baseline_started = True
        result.since = since = max(baseline, int(now) - window_s)
        if since >= now:
            return result
        listed: list[_Listed] = []
        async with self.connect() as client:
            for name in self.mailboxes:
                listed += await self._list(redis, client, name, since, names)
        listed.sort(key=lambda m: m.received_at, reverse=True)
        if len(listed) > max_emails:
            listed, result.complete = listed[:max_emails], False
        result.undiscovered = sum(m.undiscovered for m in listed)
        await gap_audit.check(redis, self.account, result,
                            [m.id for m in listed if not m.undiscovered], names)
        return result

    async def _list(self, redis: Redis, client: ImapClient, name: str, since: int,
                    names: AccountKeys) -> list[_Listed]:
        state = await client.select(name, readonly=True)
        uids = await client.uid_search("SINCE", since_day(since))
        # Read after the listing: what the catch-up saved by now it enqueued before saving.
        cursor: Cursor | None = (await read_cursors(redis, names)).get(name)
        watermark = await read_watermark(redis, names) or 0
        same = cursor is not None and cursor.uidvalidity == state.uidvalidity
        out: list[_Listed] = []
        for start in range(0, len(uids), FETCH_PAGE):
            fetched = await client.uid_fetch(uids[start:start + FETCH_PAGE],
                                             ["UID", "INTERNALDATE"])
            for uid, item in fetched.items():
                if item.internaldate is None:
                    continue
                at = int(item.internaldate.timestamp())
                if at <= since:
                    continue
                pending = (uid > cursor.last_uid) if same and cursor else at > watermark
                out.append(_Listed(mail_id(name, state.uidvalidity, uid), at, pending))
        return out
