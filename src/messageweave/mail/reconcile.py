"""Gap-free new-mail discovery (reference §1.5: the reconcile pass).

One pass, under `lock:reconcile`:

- **First run** (no cursor): record the current Email state and the watermark (now). Nothing that
  is already in the mailbox is notified. The instant right after the state was read is kept as
  the baseline (`state:jmap:baseline_at`): the gap auditor never looks at mail before it.
- **Replay** (cursor = a bare Email state): `Email/changes` from it, 4096 changes a page from
  the first (each Cyrus request costs in proportion to the mail after its state, so fewer, fuller
  pages are faster; a lower `Budget.initial_window` doubles while `hasMoreChanges`). Only
  `created` ids notify, and only when the email sits in a notify mailbox (roles from
  `notify_mailbox_roles`, default inbox) and in no Drafts / Sent / Junk / Trash mailbox.
  `updated` and `destroyed` never notify.
- **Re-baseline** (the server cannot calculate changes, or rejects the state): take the current
  state and walk only mail received after the watermark (`Email/query {after}`, oldest first,
  paged). The cursor `baseline:{hex(state)}:{position}` lets a walk cut by a budget resume; when
  the walk ends, replay continues from that state.

The cursor is saved after every page, by a Lua script that writes only while this pass still owns
the lock: a lost lease aborts the pass without moving the cursor. A page is enqueued in one
round trip (`enqueue_new_mails`: per mail the atomic dedup claim + XADD), so a page replayed
after a crash enqueues nothing twice.

**Backlog digest** (`digest_threshold` > 0, issue #16): the pass holds the ids of its new mails
instead of enqueuing them page by page, and holds back the cursor with them (never saved past a
mail not enqueued yet: a crash replays those pages). At the end of the pass (or when a budget
cuts it), more than `digest_threshold` held mails go out as digest entries
(`enqueue_digest`: one entry, each mail's claim naming it, in one script), fewer one entry per
mail as without the digest; then the cursor is saved. A pass holds at most
2 × `DIGEST_MAX_IDS` ids: beyond that it enqueues a full digest entry and goes on, and it ends
by splitting what it holds in two, so every entry of a split pass holds more than
`DIGEST_THRESHOLD_MAX` mails. The worker then groups each entry's mails by chat (`pipeline.digest`).

A replay page is one request: Email/changes with the Email/get of its `created` ids (only
`mailboxIds`). The next page's request goes out as soon as a page has arrived (it needs only its
new state): the server works on it while Redis takes the page. The cursor still moves page by
page, after each page's mails are enqueued; a failing pass cancels the request in flight. A pass
holds at most two pages, never a list of the whole mailbox: a catch-up over 100,000 mails runs in
the memory of two pages.

Which mailboxes notify is checked in that same request, not by a round trip of its own: the
mailbox list is remembered per client with the Mailbox state it was read at, and each page ends
with `Mailbox/changes` from that state (a `Mailbox/get` when nothing is remembered yet). When
the answer shows anything but changed counts (a mailbox created, destroyed, renamed, its role
changed, or the server cannot tell), the list is read again before the page is classified.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from messageweave.aio import cancel
from messageweave.config.model import EXCLUDED_ROLES
from messageweave.mail.backlog import Backlog
from messageweave.mail.jmap import (
    CannotCalculateChanges,
    ChangesPage,
    EmailMeta,
    InvalidArguments,
    JmapClient,
    MailboxList,
)
from messageweave.mail.jmap.mailboxes import mailbox_sets
from messageweave.mail.passes import (
    Budget,
    Progress,
    ProgressCallback,
    ReconcileBusy,
    ReconcileError,
)
from messageweave.ops import metrics
from messageweave.store import keys
from messageweave.store.gaps import record_baseline
from messageweave.store.keys import AccountKeys
from messageweave.store.locks import Lock, LockLease, LockLost
from messageweave.store.mail_entries import mark_not_notified
from messageweave.store.reconcile_state import read_cursor, reconcile_lock
from messageweave.store.reconcile_state import save_cursor as _save_cursor
from messageweave.store.redis import Redis

log = logging.getLogger(__name__)

BASELINE_PREFIX = "baseline:"
# Mail received up to this long before a good pass may be walked again after a re-baseline (its
# dedup key absorbs the repeat); it covers clock skew between us and the JMAP server.
WATERMARK_SKEW_S = 60
OLDEST_FIRST = ({"property": "receivedAt", "isAscending": True},)
WALK_PROPERTIES = ("mailboxIds",)  # all `_notifies` looks at
NEXT_PAGE_TASK = "reconcile-next-page"

# The mailbox list each client last read, with its Mailbox state: a hint that every page checks
# against the server (Mailbox/changes in the page's own request), never trusted unchecked. It
# goes with its client (a new configuration, a new client: a fresh read).
_known_mailboxes: weakref.WeakKeyDictionary[JmapClient, MailboxList] = (
    weakref.WeakKeyDictionary())


# ---------------------------------------------------------------------------------- cursor


@dataclass(frozen=True)
class Walk:
    state: str
    position: int


@dataclass(frozen=True)
class Replay:
    state: str



def encode_walk(state: str, position: int) -> str:
    return f"{BASELINE_PREFIX}{state.encode().hex()}:{position}"


def parse_cursor(raw: str) -> Walk | Replay | None:
    """`baseline:{hex(state)}:{position}` → Walk; any other string → Replay. A baseline cursor
    that does not decode → None (start a new baseline)."""
    if not raw.startswith(BASELINE_PREFIX):
        return Replay(raw)
    body = raw[len(BASELINE_PREFIX):]
    hex_state, sep, position = body.rpartition(":")
    if not sep or not position.isdigit():
        return None
    try:
        state = bytes.fromhex(hex_state).decode()
    except (ValueError, UnicodeDecodeError):
        return None
    return Walk(state, int(position))


# ---------------------------------------------------------------------------------- pass


class Reconciler:
    """One pass over the mailbox of `client`'s account; `run()` owns no lock (see `reconcile`)."""

    def __init__(
        self,
        redis: Redis,
        client: JmapClient,
        lock: Lock,
        roles: Iterable[str],
        *,
        budget: Budget | None = None,
        on_progress: ProgressCallback | None = None,
        lease: LockLease | None = None,
        digest_threshold: int = 0,
        names: AccountKeys = keys.DEFAULT,
    ) -> None:
        self.redis = redis
        self.names = names  # the account's keys (its stream, claims, cursor)
        self.client = client
        self.lock = lock
        self.roles = frozenset(r.lower() for r in roles) - EXCLUDED_ROLES
        self.budget = budget or Budget()
        self._on_progress = on_progress
        self._lease = lease
        self.progress = Progress()
        self._deadline = 0.0
        self._notify: frozenset[str] = frozenset()
        self._excluded: frozenset[str] = frozenset()
        self.digest_threshold = max(0, digest_threshold)
        # With the digest on, the cursor (and watermark) held back with the backlog's mails.
        self._held_cursor: tuple[str, int | None] | None = None

    @functools.cached_property
    def _backlog(self) -> Backlog:
        """Made on first use: the account is known once the session was read."""
        return Backlog(self.redis, self.client.account_id, self.digest_threshold, self.progress,
                       self.names)

    async def run(self) -> Progress:
        started = time.time()
        self._deadline = time.monotonic() + self.budget.seconds
        stored = await read_cursor(self.redis, self.names)
        parsed = parse_cursor(stored.cursor) if stored.cursor is not None else None
        if stored.cursor is None or (stored.watermark is None and not isinstance(parsed, Replay)):
            state = await self.client.email_state()
            # before the cursor: a crash in between leaves no cursor, so the next pass is a
            # first run again and writes both
            await self._save_baseline(math.ceil(time.time()))
            await self._save(state, int(started))
            self._report("first_run", complete=True)
            return self.progress
        watermark = stored.watermark if stored.watermark is not None else int(started)
        if parsed is None:
            parsed = Walk(await self.client.email_state(), 0)
            self.progress.rebaselined = True
        if isinstance(parsed, Walk):
            walked = await self._walk(parsed, watermark)
            if walked is None:
                await self._release()
                return self.progress
            state = walked
        else:
            state = parsed.state
        caught_up = await self._replay(state, watermark, int(started) - WATERMARK_SKEW_S)
        await self._release()
        if caught_up:
            self._report("done", complete=True)
        return self.progress

    # -------------------------------------------------------------- replay

    async def _replay(self, state: str, watermark: int, done_watermark: int) -> bool:
        """Email/changes from `state`, each page requested while the one before is enqueued;
        True when caught up (the last page's cursor is saved with `done_watermark`), False
        when a budget cut it."""
        window, pages = max(1, self.budget.initial_window), 0
        upcoming = self._next_page(state, window, pages)
        try:
            while upcoming is not None:
                try:
                    page, known = await upcoming
                except (CannotCalculateChanges, InvalidArguments) as exc:
                    if self.progress.rebaselined:
                        raise ReconcileError(f"Email/changes failed right after a re-baseline: "
                                             f"{exc.type}") from exc
                    log.warning("reconcile: %s from the stored state, re-baselining", exc.type)
                    self.progress.rebaselined = True
                    walked = await self._walk(Walk(await self.client.email_state(), 0), watermark)
                    if walked is None:
                        return False
                    window, pages = max(1, self.budget.initial_window), 0
                    upcoming = self._next_page(walked, window, pages)
                    continue
                await self._check_mailboxes(page, known)
                changes, pages = page.changes, pages + 1
                window = min(window * 2, self.budget.window_cap)
                upcoming = (self._next_page(changes.new_state, window, pages)
                            if changes.has_more else None)
                await self._enqueue(page.created)
                await self._save(changes.new_state, None if changes.has_more else done_watermark)
                self._report("replay")
                if not changes.has_more:
                    return True
            return False
        finally:
            with contextlib.suppress(Exception):  # the pass fails for its own reason
                await cancel(upcoming)

    def _next_page(self, state: str, window: int, pages: int
                   ) -> asyncio.Task[tuple[ChangesPage, MailboxList | None]] | None:
        """The request of the page after `state`, sent now; None when the budget is spent."""
        if pages >= self.budget.max_change_pages or self._out_of_time():
            return None
        self._check_lease()
        known = _known_mailboxes.get(self.client)

        async def fetch() -> tuple[ChangesPage, MailboxList | None]:
            page = await self.client.changes_page(
                state, window, properties=WALK_PROPERTIES,
                mailboxes_since=known.state if known is not None else None)
            return page, known

        return asyncio.create_task(fetch(), name=NEXT_PAGE_TASK)

    # -------------------------------------------------------------- walk

    async def _walk(self, walk: Walk, watermark: int) -> str | None:
        """Walk mail received after `watermark`; the state to replay from when the walk is
        over, or None when a budget cut it (the walk cursor is saved)."""
        after = datetime.fromtimestamp(watermark, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        position, pages, emails = walk.position, 0, 0
        await self._save(encode_walk(walk.state, position))
        await self._load_mailboxes()
        while True:
            if (pages >= self.budget.max_walk_pages or emails >= self.budget.max_walk_emails
                    or self._out_of_time()):
                return None
            self._check_lease()
            page = await self.client.query_and_get(
                {"after": after}, OLDEST_FIRST, self.budget.page_size,
                position=position, properties=WALK_PROPERTIES,
            )
            await self._enqueue(page.emails)
            position += len(page.ids)
            pages += 1
            emails += len(page.ids)
            if len(page.ids) < self.budget.page_size:
                await self._save(walk.state)
                return walk.state
            await self._save(encode_walk(walk.state, position))
            self._report("walk")

    # -------------------------------------------------------------- helpers

    async def _load_mailboxes(self) -> None:
        self._use_mailboxes(await self.client.mailbox_list())

    async def _check_mailboxes(self, page: ChangesPage, known: MailboxList | None) -> None:
        """The mailboxes to classify `page` with: those read in its request, the remembered
        ones when its Mailbox/changes shows only new counts, else a fresh read."""
        if page.mailboxes is not None:
            self._use_mailboxes(page.mailboxes)
        elif (known is not None and page.mailbox_changes is not None
              and page.mailbox_changes.counts_only):
            self._use_mailboxes(MailboxList(page.mailbox_changes.new_state, known.mailboxes))
        else:
            await self._load_mailboxes()

    def _use_mailboxes(self, listing: MailboxList) -> None:
        _known_mailboxes[self.client] = listing
        self._notify, self._excluded = mailbox_sets(listing.mailboxes, self.roles)

    def _notifies(self, email: EmailMeta) -> bool:
        return bool(email.mailbox_ids & self._notify) and not (email.mailbox_ids & self._excluded)

    async def _enqueue(self, emails: list[EmailMeta]) -> None:
        account = self.client.account_id
        notify = [e.id for e in emails if self._notifies(e)]
        quiet = [e.id for e in emails if not self._notifies(e)]
        self.progress.emails += len(emails)
        await self._backlog.add(notify)
        await mark_not_notified(self.redis, account, quiet, names=self.names)

    async def _release(self) -> None:
        """Enqueue the mails the backlog holds (`mail.backlog`), then save the cursor held
        back with them."""
        await self._backlog.release()
        if self._held_cursor is not None:
            cursor, watermark = self._held_cursor
            self._held_cursor = None
            await self._save(cursor, watermark)

    async def _save(self, cursor: str, watermark: int | None = None) -> None:
        self._check_lease()
        if self._backlog.holding:  # not past mails not enqueued yet: `_release` saves it
            earlier = self._held_cursor[1] if self._held_cursor is not None else None
            self._held_cursor = (cursor, watermark if watermark is not None else earlier)
            return
        if not await _save_cursor(self.redis, self.lock, cursor, watermark, names=self.names):
            raise LockLost("lock:reconcile was lost; cursor not moved")
        self.progress.cursor = cursor

    async def _save_baseline(self, at: int) -> None:
        self._check_lease()
        if not await record_baseline(self.redis, self.lock, at, self.names):
            raise LockLost("lock:reconcile was lost; baseline not recorded")

    def _check_lease(self) -> None:
        if self._lease is not None and self._lease.lost:
            raise LockLost("lock:reconcile was lost; cursor not moved")

    def _out_of_time(self) -> bool:
        return time.monotonic() >= self._deadline

    def _report(self, phase: str, *, complete: bool = False) -> None:
        self.progress.phase = phase
        self.progress.pages += 0 if complete else 1
        self.progress.complete = complete
        if self._on_progress is not None:
            self._on_progress(self.progress)


async def reconcile(
    redis: Redis,
    client: JmapClient,
    roles: Iterable[str],
    *,
    budget: Budget | None = None,
    on_progress: ProgressCallback | None = None,
    renew_every_s: float = keys.RECONCILE_LOCK_RENEW_S,
    digest_threshold: int = 0,
    source: str = "reconcile",
    names: AccountKeys = keys.DEFAULT,
) -> Progress:
    """One pass under `lock:reconcile` (ReconcileBusy when another pass holds it);
    `digest_threshold` > 0 turns the backlog digest on (module docstring). The mails it
    enqueued are reported as ingested from `source` (`jmap_push` for a push's catch-up), also
    those of a pass that failed after enqueueing some.

    JMAP and Redis errors propagate (the cursor keeps its last checkpoint)."""
    lock = reconcile_lock(redis, names)
    lease = LockLease(lock, renew_every_s)
    reconciler = Reconciler(redis, client, lock, roles, budget=budget, on_progress=on_progress,
                            lease=lease, digest_threshold=digest_threshold, names=names)
    if not await lock.acquire():
        raise ReconcileBusy("another reconcile pass is running")
    lease.start()
    ok = False
    try:
        await client.get_session()
        result = await reconciler.run()
        ok = True
        return result
    finally:
        metrics.observe_reconcile(ok)
        if reconciler.progress.enqueued:
            metrics.observe_ingest(source, reconciler.progress.enqueued)
        await lease.stop()
        with contextlib.suppress(Exception):
            await lock.release()
