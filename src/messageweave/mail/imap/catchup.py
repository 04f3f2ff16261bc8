"""New mail in IMAP mailboxes, exactly once (SPEC Part F.2; issue #33): the catch-up pass that
every (re)connect of the IDLE holder and the periodic reconcile run, under `lock:reconcile`.

Per notify mailbox the cursor is its UIDVALIDITY, the highest UID seen and (with CONDSTORE) its
HIGHESTMODSEQ (`state:imap:cursor`, one hash field per mailbox); beside it the watermark, the
newest INTERNALDATE seen in any of them (`state:imap:watermark`).

- **First pass of a mailbox** (no cursor): the cursor is UIDNEXT − 1; nothing already there is
  notified (Part C.2). The first pass of all records the baseline the gap auditor starts from.
- **Replay** (same UIDVALIDITY): `UID SEARCH UID {last+1}:*`, in pages of `PAGE` oldest first;
  each page's mails are claimed and enqueued (`store.mail_entries.enqueue_new_mails`: the same dedup
  claim and stream as JMAP mail), then the cursor moves past them. A pass that dies after the
  XADD and before the save replays the page, and the claims enqueue nothing twice.
- **UIDVALIDITY changed** (the mailbox was re-created, or the server lost its UID list): every
  UID is new, so UIDs say nothing; only mail whose INTERNALDATE is after the watermark is new
  (`UID SEARCH SINCE`, day-granular, then each INTERNALDATE compared). Mail of the watermark's
  very second is taken for old: no old mail is notified again, at the price of a mail that came
  in the same second as the newest one seen before the change.
- **Backlog digest** (`digest_threshold` > 0): the pass holds its new mails and the cursors that
  pass them, and at its end enqueues more than `digest_threshold` as digest entries, fewer one
  entry each, then saves the cursors (as the JMAP reconcile does; a crash replays them).

Every save is one Lua script that writes only while the pass owns the lock; the lease is renewed
before each page and every `RECONCILE_LOCK_RENEW_S` beside the pass (`store.locks.LockLease`: a
slow page outlasts the lock's 15 s TTL), so a long backlog keeps it and a pass that lost it
stops without moving the cursor. Email ids are `mail.imap.ids.mail_id`.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from messageweave.mail.backlog import Backlog
from messageweave.mail.imap.client import ImapClient
from messageweave.mail.imap.ids import mail_id
from messageweave.mail.imap.mailbox import MailboxState
from messageweave.ops import metrics
from messageweave.store import keys
from messageweave.store.gaps import record_baseline
from messageweave.store.keys import AccountKeys
from messageweave.store.locks import Lock, LockLease, LockLost
from messageweave.store.reconcile_state import reconcile_lock
from messageweave.store.redis import Redis, text_of
from messageweave.store.scripts import Script

log = logging.getLogger(__name__)

PAGE = 500  # UIDs fetched (INTERNALDATE only) and enqueued at a time
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")

# KEYS: lock (lock:reconcile), cursors (state:imap:cursor), watermark (state:imap:watermark)
# ARGV: owner, mailbox, cursor, watermark ("" = leave it; else kept when higher)
# → 1 when saved, 0 when the lease is lost (nothing written).
SAVE_IMAP_CURSOR = Script("""
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
if ARGV[4] ~= '' then
  local stored = tonumber(redis.call('GET', KEYS[3]) or '0')
  if tonumber(ARGV[4]) > stored then redis.call('SET', KEYS[3], ARGV[4]) end
end
return 1
""", keys=("lock", "cursors", "watermark"), args=("owner", "mailbox", "cursor", "watermark"))


class CatchupBusy(Exception):
    """Another pass holds `lock:reconcile`."""


@dataclass(frozen=True)
class Cursor:
    uidvalidity: int
    last_uid: int
    highestmodseq: int | None = None

    def encode(self) -> str:
        modseq = "" if self.highestmodseq is None else str(self.highestmodseq)
        return f"{self.uidvalidity}:{self.last_uid}:{modseq}"

    @classmethod
    def decode(cls, raw: str) -> Cursor | None:
        """None for a value that is not ours (the mailbox then starts over as a first pass)."""
        parts = raw.split(":")
        if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
            return None
        modseq = int(parts[2]) if parts[2].isdigit() else None
        return cls(int(parts[0]), int(parts[1]), modseq)


@dataclass
class CatchupProgress:
    """What a pass did: mailboxes baselined, re-baselined (UIDVALIDITY changed), mails
    enqueued, digest entries; `complete` False when the budget cut it."""

    first_runs: list[str] = field(default_factory=list)
    rebaselined: list[str] = field(default_factory=list)
    enqueued: int = 0
    digests: int = 0
    complete: bool = True


async def read_cursors(redis: Redis, names: AccountKeys = keys.DEFAULT) -> dict[str, Cursor]:
    raw = await redis.hgetall(names.of(keys.IMAP_CURSOR))
    found = {text_of(k) or "": Cursor.decode(text_of(v) or "") for k, v in raw.items()}
    return {name: cursor for name, cursor in found.items() if cursor is not None}


async def read_watermark(redis: Redis, names: AccountKeys = keys.DEFAULT) -> int | None:
    raw = text_of(await redis.get(names.of(keys.IMAP_WATERMARK)))
    return int(raw) if raw and raw.isdigit() else None


class ImapCatchup:
    """One pass over `mailboxes` of `client`'s account (`catch_up` takes the lock)."""

    def __init__(self, redis: Redis, client: ImapClient, lock: Lock, mailboxes: Sequence[str],
                 account: str, *, digest_threshold: int = 0, seconds: float = 20.0,
                 names: AccountKeys = keys.DEFAULT) -> None:
        self.redis, self.client, self.lock, self.names = redis, client, lock, names
        self.mailboxes = list(dict.fromkeys(mailboxes))
        self.account = account
        self.digest_threshold = max(0, digest_threshold)
        self.progress = CatchupProgress()
        self._deadline = time.monotonic() + seconds
        self._backlog = Backlog(redis, account, digest_threshold, self.progress, names)
        self._held_cursors: dict[str, tuple[Cursor, int | None]] = {}

    async def run(self) -> CatchupProgress:
        cursors = await read_cursors(self.redis, self.names)
        watermark = await read_watermark(self.redis, self.names)
        if watermark is None:
            watermark = math.ceil(time.time())
            if not await record_baseline(self.redis, self.lock, watermark, self.names):
                raise LockLost("lock:reconcile was lost; baseline not recorded")
        for name in self.mailboxes:
            if self._out_of_time():
                self.progress.complete = False
                break
            state = await self.client.select(name, readonly=True)
            stored = cursors.get(name)
            if stored is None:
                await self._save(name, await self._first(state), watermark)
                self.progress.first_runs.append(name)
            elif stored.uidvalidity != state.uidvalidity:
                log.warning("imap: UIDVALIDITY of a notify mailbox changed; re-baselining it")
                self.progress.rebaselined.append(name)
                await self._since_watermark(state, watermark)
            else:
                await self._replay(state, stored)
        await self._release()
        return self.progress

    async def _first(self, state: MailboxState) -> Cursor:
        if state.uidnext is not None:
            last = state.uidnext - 1
        else:
            found = await self.client.uid_search("ALL")
            last = found[-1] if found else 0
        return Cursor(state.uidvalidity, last, state.highestmodseq)

    async def _replay(self, state: MailboxState, stored: Cursor) -> None:
        if state.uidnext is not None and state.uidnext <= stored.last_uid + 1:
            await self._save(state.name, Cursor(state.uidvalidity, stored.last_uid,
                                                state.highestmodseq), None)
            return
        found = await self.client.uid_search("UID", f"{stored.last_uid + 1}:*")
        await self._pages(state, [u for u in found if u > stored.last_uid], stored.last_uid,
                          after=None)

    async def _since_watermark(self, state: MailboxState, watermark: int) -> None:
        day = dt.datetime.fromtimestamp(watermark, dt.UTC) - dt.timedelta(days=1)
        since = f"{day.day}-{_MONTHS[day.month - 1]}-{day.year}"
        found = await self.client.uid_search("SINCE", since)
        await self._pages(state, found, 0, after=watermark)

    async def _pages(self, state: MailboxState, uids: list[int], last: int, *,
                     after: int | None) -> None:
        """Enqueue `uids` page by page. A replay (`after` None) moves the mailbox's cursor past
        each page. A re-baseline enqueues only mail received after `after` and saves the new
        cursor once, at its end: its UIDs are in no order of time, so a walk cut by the budget
        must start over (the claims absorb what it enqueued), never replay from its middle."""
        newest: int | None = None
        for start in range(0, len(uids), PAGE):
            if self._out_of_time():
                self.progress.complete = False
                return
            if not await self.lock.renew():
                raise LockLost("lock:reconcile was lost; cursor not moved")
            page = uids[start:start + PAGE]
            fetched = await self.client.uid_fetch(page, ["UID", "INTERNALDATE"])
            dates = {uid: int(f.internaldate.timestamp()) for uid, f in fetched.items()
                     if f.internaldate is not None}
            new = [u for u in page if u in fetched and (after is None or dates.get(u, 0) > after)]
            await self._enqueue([mail_id(state.name, state.uidvalidity, u) for u in new])
            last = max(last, page[-1])
            newest = max([newest or 0, *(dates[u] for u in new if u in dates)]) or None
            if after is None:
                await self._save(state.name, Cursor(state.uidvalidity, last,
                                                    state.highestmodseq), newest)
        if not uids or after is not None:  # nothing new, or a re-baseline: the cursor moves on
            top = (state.uidnext - 1) if state.uidnext is not None else last
            await self._save(state.name, Cursor(state.uidvalidity, max(last, top),
                                                state.highestmodseq), newest)

    async def _enqueue(self, ids: list[str]) -> None:
        await self._backlog.add(ids)

    async def _release(self) -> None:
        await self._backlog.release()
        saved, self._held_cursors = self._held_cursors, {}
        for name, (cursor, watermark) in saved.items():
            await self._write(name, cursor, watermark)

    async def _save(self, name: str, cursor: Cursor, watermark: int | None) -> None:
        if self.digest_threshold:  # saved after the held mails are enqueued (`_release`)
            earlier = self._held_cursors.get(name, (cursor, None))[1]
            marks = [m for m in (earlier, watermark) if m is not None]
            self._held_cursors[name] = (cursor, max(marks) if marks else None)
            return
        await self._write(name, cursor, watermark)

    async def _write(self, name: str, cursor: Cursor, watermark: int | None) -> None:
        saved = await SAVE_IMAP_CURSOR(
            self.redis, keys={"lock": self.lock.key, "cursors": self.names.of(keys.IMAP_CURSOR),
                              "watermark": self.names.of(keys.IMAP_WATERMARK)},
            args={"owner": self.lock.owner, "mailbox": name, "cursor": cursor.encode(),
                  "watermark": "" if watermark is None else str(watermark)})
        if int(saved) != 1:
            raise LockLost("lock:reconcile was lost; cursor not moved")

    def _out_of_time(self) -> bool:
        return time.monotonic() >= self._deadline


async def catch_up(redis: Redis, client: ImapClient, mailboxes: Sequence[str], account: str, *,
                   digest_threshold: int = 0, seconds: float = 20.0,
                   source: str = "reconcile",
                   names: AccountKeys = keys.DEFAULT) -> CatchupProgress:
    """One pass under `lock:reconcile` (`CatchupBusy` when another pass holds it). IMAP and
    Redis errors propagate; the cursors keep their last checkpoint."""
    lock = reconcile_lock(redis, names)
    if not await lock.acquire():
        raise CatchupBusy("another catch-up pass is running")
    catchup = ImapCatchup(redis, client, lock, mailboxes, account,
                          digest_threshold=digest_threshold, seconds=seconds, names=names)
    lease = LockLease(lock, keys.RECONCILE_LOCK_RENEW_S)  # a page may outlast the lock's TTL
    lease.start()
    ok = False
    try:
        progress = await catchup.run()
        ok = True
        return progress
    finally:
        await lease.stop()
        metrics.observe_reconcile(ok)
        if catchup.progress.enqueued:
            metrics.observe_ingest(source, catchup.progress.enqueued)
        try:
            await lock.release()
        except Exception:  # the lock expires by itself; the pass's own outcome stands
            log.warning("imap: the catch-up lock could not be released")
