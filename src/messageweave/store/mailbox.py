"""Redis operations of the mailbox side: the `stalwart:jmap` entries, the reconcile lock and
cursor, the built-in schedule slots, and the catch-up flag (and the signal that wakes the
schedulers for it). The push subscription keys are `messageweave.store.push`.

This module owns the shape of a `stalwart:jmap` entry (`_ADD_ENTRY`, docs/reference.md §1) and
every script that writes one: the reconcile's (`CLAIM_DEDUP_AND_ENQUEUE_MANY`), the digest's
(`CLAIM_DEDUP_AND_ENQUEUE_DIGEST`) and the gap auditor's (`CHECK_AND_CLAIM`, run by
`messageweave.store.gaps.check_and_claim`). Every multi-key change that must be atomic is one
Lua script (`messageweave.store.scripts.Script`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass

from messageweave.aio import cancel, every, raise_if_cancelling
from messageweave.store import keys
from messageweave.store.keys import AccountKeys
from messageweave.store.redis import Redis, int_of, text_of
from messageweave.store.redis_url import initialized
from messageweave.store.scripts import Script

log = logging.getLogger(__name__)

STREAM_JMAP_MAXLEN = 100_000
NOT_NOTIFIED = "not_notified"
# A digest entry (issue #16) holds at most this many mails.
DIGEST_KIND = "digest"
DIGEST_MAX_IDS = 2048

# The two shapes of a `stalwart:jmap` entry, as Lua functions for the scripts that write one:
# a mail `{account_id, email_id}`, or a digest `{kind: digest, account_id, email_ids}`, its ids
# space-separated (a JMAP id never holds a space, RFC 8620 §1.2). Each returns the new entry id.
_ADD_ENTRY = f"""
local function add_mail(stream, maxlen, account, email)
  return redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*',
                    'account_id', account, 'email_id', email)
end
local function add_digest(stream, maxlen, account, emails)
  return redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', 'kind', '{DIGEST_KIND}',
                    'account_id', account, 'email_ids', table.concat(emails, ' '))
end
"""


async def mark_not_notified(redis: Redis, account_id: str, email_ids: list[str], *,
                            names: AccountKeys = keys.DEFAULT) -> None:
    """Claim `dedup:jmap:{account}:{email}` for created mail the reconcile saw outside the
    notify mailboxes (e.g. in Junk), with the value `not_notified`, when nothing claimed it yet.
    A mail moved into the inbox later is then neither notified by the reconcile (only created
    mail notifies) nor reported missing by the gap auditor (the claim is not an entry id)."""
    if not email_ids:
        return
    async with redis.pipeline(transaction=False) as pipe:
        for email_id in email_ids:
            pipe.set(names.dedup_jmap(account_id, email_id), NOT_NOTIFIED, nx=True,
                     ex=keys.DEDUP_JMAP_TTL_S)
        await pipe.execute()


# KEYS: stream (stalwart:jmap), claims* (dedup:jmap:{account}:{email} per mail)
# ARGV: ttl, account_id, maxlen, email_ids* (in KEYS order)
# → how many were enqueued. Per mail that nobody claimed yet (within the dedup TTL), one entry
# and the claim, which holds the entry id (not just "1") so the gap auditor can follow a mail to
# its entry (its own claim, `CHECK_AND_CLAIM`, runs on the same key); a mail claimed already (say
# by a pass that crashed) is skipped.
CLAIM_DEDUP_AND_ENQUEUE_MANY = Script(_ADD_ENTRY + """
local enqueued = 0
for n = 2, #KEYS do
  if redis.call('EXISTS', KEYS[n]) == 0 then
    local id = add_mail(KEYS[1], ARGV[3], ARGV[2], ARGV[n + 2])
    redis.call('SET', KEYS[n], id, 'EX', ARGV[1])
    enqueued = enqueued + 1
  end
end
return enqueued
""", keys=("stream", "claims*"), args=("ttl", "account_id", "maxlen", "email_ids*"))
ENQUEUE_BATCH = 512  # mails per script, so none holds Redis long; a page's go in one round trip


def _claims(names: AccountKeys, account_id: str,
            email_ids: list[str]) -> dict[str, str | list[str]]:
    """The KEYS of a script that claims `email_ids`: the stream, then each mail's claim (the
    account's whose `names` these are)."""
    return {"stream": names.stream_jmap,
            "claims": [names.dedup_jmap(account_id, e) for e in email_ids]}


async def enqueue_new_mails(
    redis: Redis, account_id: str, email_ids: list[str], *, batch: int = ENQUEUE_BATCH,
    names: AccountKeys = keys.DEFAULT,
) -> int:
    """Claim `dedup:jmap:{account}:{email}` and append `{account_id, email_id}` to
    `stalwart:jmap`, atomically, for each of `email_ids` nobody claimed yet, in order, in one
    round trip; how many were enqueued (a mail already claimed, or named twice, is enqueued
    once)."""
    async with redis.pipeline(transaction=False) as pipe:
        for chunk in (email_ids[i:i + batch] for i in range(0, len(email_ids), batch)):
            CLAIM_DEDUP_AND_ENQUEUE_MANY.queue(pipe, keys=_claims(names, account_id, chunk), args={
                "ttl": keys.DEDUP_JMAP_TTL_S, "account_id": account_id,
                "maxlen": STREAM_JMAP_MAXLEN, "email_ids": chunk})
        return sum(int(n) for n in await pipe.execute())


# KEYS: stream (stalwart:jmap), claims* (dedup:jmap:{account}:{email} per mail)
# ARGV: ttl, account_id, maxlen, email_ids* (in KEYS order)
# → {entry id ('' = none), how many it holds}.
# One entry for every mail of the list nobody claimed yet (a mail claimed already, say by a
# pass that crashed after this script, is left out; one named twice is in it once), and each
# of their claims names that entry, like `CLAIM_DEDUP_AND_ENQUEUE_MANY`'s: the gap auditor
# follows a mail to the digest entry and its terminal record.
CLAIM_DEDUP_AND_ENQUEUE_DIGEST = Script(_ADD_ENTRY + """
local fresh, picked, names = {}, {}, {}
for n = 2, #KEYS do
  if not fresh[KEYS[n]] and redis.call('EXISTS', KEYS[n]) == 0 then
    fresh[KEYS[n]] = true
    picked[#picked + 1] = n
    names[#names + 1] = ARGV[n + 2]
  end
end
if #picked == 0 then return {'', 0} end
local id = add_digest(KEYS[1], ARGV[3], ARGV[2], names)
for _, n in ipairs(picked) do
  redis.call('SET', KEYS[n], id, 'EX', ARGV[1])
end
return {id, #picked}
""", keys=("stream", "claims*"), args=("ttl", "account_id", "maxlen", "email_ids*"))


async def enqueue_digest(redis: Redis, account_id: str, email_ids: list[str], *,
                         names: AccountKeys = keys.DEFAULT) -> tuple[str | None, int]:
    """One digest entry on `stalwart:jmap` for those of `email_ids` not claimed yet, and their
    claims, atomically: (the entry id or None when every mail was claimed already, how many
    mails it holds). At most `DIGEST_MAX_IDS` ids."""
    if not email_ids:
        return None, 0
    if len(email_ids) > DIGEST_MAX_IDS:
        raise ValueError(f"a digest entry holds at most {DIGEST_MAX_IDS} mails")
    entry, count = await CLAIM_DEDUP_AND_ENQUEUE_DIGEST(
        redis, keys=_claims(names, account_id, email_ids), args={
            "ttl": keys.DEDUP_JMAP_TTL_S, "account_id": account_id,
            "maxlen": STREAM_JMAP_MAXLEN, "email_ids": email_ids})
    return text_of(entry) or None, int(count)


# A mail the gap auditor looks at is **missing** when nobody owns it any more: its claim is
# absent, or names a `stalwart:jmap` entry that has no terminal record and is not owned by the
# pipeline (still in the stream, and pending in `stalwart-workers` or not read by the group yet).
# KEYS: stream (stalwart:jmap), mails* (per mail its dedup:jmap key, then its audit:healed key)
# ARGV: group, committed_prefix (`delivery:committed:stalwart:jmap:`), ttl, maxlen, account_id,
#       email_ids* (one per mail, in KEYS order)
# → per mail three values: 'ok' | 'missing', the detail, the new entry id ('' = none)
#   ok details: terminal, pending, unread, not_notified (the reconcile saw it outside the notify
#   mailboxes), legacy (a claim from before claims held entry ids)
#   missing details: unclaimed (no claim), lost (the claimed entry is neither terminal nor owned)
# A missing mail is re-enqueued (XADD, claim := new id, healed := new id) unless the auditor
# already re-enqueued it once (healed exists): then it is only reported. Deciding and
# re-enqueueing in one script, on the reconcile's claim key, the reconcile and another audit
# can never come in between and enqueue the mail a second time.
# The terminal record's name is built from the claim inside the script (like the ledger's
# heartbeat lookup): it cannot be known before the claim is read.
CHECK_AND_CLAIM = Script(_ADD_ENTRY + """
local stream, group, prefix = KEYS[1], ARGV[1], ARGV[2]
local ttl, maxlen, account = ARGV[3], ARGV[4], ARGV[5]

local function parse(id)
  local ms, seq = string.match(id, '^(%d+)%-(%d+)$')
  if not ms then return nil end
  return tonumber(ms), tonumber(seq)
end

local function later(a, b)
  local am, as = parse(a)
  local bm, bs = parse(b)
  if am ~= bm then return am > bm end
  return as > bs
end

-- The group's last-delivered-id; no group yet means no entry has been read.
local has_group, last = false, '0-0'
local groups = redis.pcall('XINFO', 'GROUPS', stream)
if type(groups) == 'table' and groups.err == nil then
  for _, g in ipairs(groups) do
    local name, lid
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] end
      if g[i] == 'last-delivered-id' then lid = g[i + 1] end
    end
    if name == group then has_group, last = true, lid end
  end
end

local function owner(id)
  if #redis.call('XRANGE', stream, id, id) == 0 then return nil end
  if not has_group or later(id, last) then return 'unread' end
  if #redis.call('XPENDING', stream, group, id, id, 1) > 0 then return 'pending' end
  return nil
end

local out = {}
for n = 1, #ARGV - 5 do
  local dedup, healed, email = KEYS[2 * n], KEYS[2 * n + 1], ARGV[5 + n]
  local claim = redis.call('GET', dedup)
  local status, detail, id = 'ok', nil, ''
  if not claim then
    status, detail = 'missing', 'unclaimed'
  elseif claim == '""" + NOT_NOTIFIED + """' then
    detail = 'not_notified'
  elseif not parse(claim) then
    detail = 'legacy'
  elseif redis.call('EXISTS', prefix .. claim) == 1 then
    detail = 'terminal'
  else
    detail = owner(claim)
    if not detail then status, detail = 'missing', 'lost' end
  end
  if status == 'missing' and redis.call('EXISTS', healed) == 0 then
    id = add_mail(stream, maxlen, account, email)
    redis.call('SET', dedup, id, 'EX', ttl)
    redis.call('SET', healed, id, 'EX', ttl)
  end
  out[#out + 1] = status
  out[#out + 1] = detail
  out[#out + 1] = id
end
return out
""", keys=("stream", "mails*"), args=(
    "group", "committed_prefix", "ttl", "maxlen", "account_id", "email_ids*"))


# ------------------------------------------------------------------------------- lock


# KEYS: lock   ARGV: owner → 1 when released, 0 when someone else holds it.
RELEASE_LOCK = Script("""
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
""", keys=("lock",), args=("owner",))

# KEYS: lock   ARGV: owner, ttl (seconds) → 1 when renewed, 0 when the lease is lost.
RENEW_LOCK = Script("""
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('EXPIRE', KEYS[1], ARGV[2])
end
return 0
""", keys=("lock",), args=("owner", "ttl"))


class Lock:
    """A lease in Redis: `SET key owner NX EX ttl`, renewed and released by owner only."""

    def __init__(self, redis: Redis, key: str, ttl_s: int) -> None:
        self.redis = redis
        self.key = key
        self.ttl_s = ttl_s
        self.owner = secrets.token_hex(16)

    async def acquire(self) -> bool:
        return bool(await self.redis.set(self.key, self.owner, nx=True, ex=self.ttl_s))

    async def renew(self) -> bool:
        result = await RENEW_LOCK(self.redis, keys={"lock": self.key},
                                  args={"owner": self.owner, "ttl": self.ttl_s})
        return int(result) == 1

    async def release(self) -> None:
        await RELEASE_LOCK(self.redis, keys={"lock": self.key}, args={"owner": self.owner})


class LockLost(Exception):
    """A `Lock`'s lease expired or was taken over while its holder worked: whatever the holder
    writes under the lock from then on is refused (the reconcile's cursor, the poller's offset),
    and the holder stops."""


def reconcile_lock(redis: Redis, names: AccountKeys = keys.DEFAULT) -> Lock:
    return Lock(redis, names.of(keys.RECONCILE_LOCK), keys.RECONCILE_LOCK_TTL_S)


# ------------------------------------------------------------------------------- cursor


@dataclass(frozen=True)
class CursorState:
    cursor: str | None
    watermark: int | None


async def read_cursor(redis: Redis, names: AccountKeys = keys.DEFAULT) -> CursorState:
    cursor, watermark = await redis.mget(names.of(keys.RECONCILE_CURSOR),
                                         names.of(keys.RECONCILE_WATERMARK))
    return CursorState(text_of(cursor), int_of(text_of(watermark)))


# KEYS: lock (lock:reconcile), cursor (state:jmap:since), watermark (state:jmap:watermark)
# ARGV: owner, cursor, watermark ("" = leave it)
# → 1 when saved, 0 when the lease is lost (nothing written).
SAVE_CURSOR = Script("""
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[2], ARGV[2])
if ARGV[3] ~= '' then
  redis.call('SET', KEYS[3], ARGV[3])
end
return 1
""", keys=("lock", "cursor", "watermark"), args=("owner", "cursor", "watermark"))


async def save_cursor(
    redis: Redis, lock: Lock, cursor: str, watermark: int | None = None, *,
    names: AccountKeys = keys.DEFAULT,
) -> bool:
    """Store the cursor (and watermark) only while `lock` is still held. False = lease lost."""
    result = await SAVE_CURSOR(
        redis,
        keys={"lock": lock.key, "cursor": names.of(keys.RECONCILE_CURSOR),
              "watermark": names.of(keys.RECONCILE_WATERMARK)},
        args={"owner": lock.owner, "cursor": cursor,
              "watermark": "" if watermark is None else str(watermark)})
    return int(result) == 1


# ------------------------------------------------------------------------------- schedule


# KEYS: slot   ARGV: interval (s) → 1: claimed (run this interval's job), 0: taken. A slot
# taken for longer than `interval` (the interval was lowered since) is cut to end within it.
CLAIM_SLOT = Script("""
local ms = tonumber(ARGV[1]) * 1000
if redis.call('SET', KEYS[1], '1', 'NX', 'PX', ms) then
  return 1
end
if redis.call('PTTL', KEYS[1]) > ms then
  redis.call('PEXPIRE', KEYS[1], ms)
end
return 0
""", keys=("slot",), args=("interval",))


async def claim_slot(redis: Redis, key: str, interval_s: int) -> bool:
    """The instance that sets `key` first runs this interval's job; the others skip it. An
    interval lowered since the slot was taken (60 s → 10 s on the page) is in force from the
    next check, not once the slot taken under the old one runs out (`CLAIM_SLOT`)."""
    return bool(await CLAIM_SLOT(redis, keys={"slot": key}, args={"interval": max(1, interval_s)}))


async def slot_free(redis: Redis, key: str) -> bool:
    """Whether the slot `claim_slot` would take is free now (no write)."""
    return not await redis.exists(key)


async def request_catchup(redis: Redis, account_id: str, *,
                          names: AccountKeys = keys.DEFAULT) -> bool:
    """Flag one pending catch-up for `account_id`; False when one was already pending."""
    return bool(await redis.set(names.reconcile_catchup(account_id), "1", nx=True,
                                ex=keys.CATCHUP_TTL_S))


async def take_catchup(redis: Redis, account_id: str, *,
                       names: AccountKeys = keys.DEFAULT) -> bool:
    """Consume the pending catch-up (GETDEL): exactly one instance gets True."""
    return await redis.getdel(names.reconcile_catchup(account_id)) is not None




class _CatchupWakes:
    """This instance's schedulers, found through its Redis client (the only thing the push
    handler and they share), each under the mail account whose flags it takes: an
    announcement wakes that account's alone, and those whose account is not known yet ("").
    Waking every scheduler for any account's push put the pushed one's tick behind one per
    account (200 `GETDEL`s through the pool for one mail, issue #37). Weak on both sides."""

    def __init__(self) -> None:
        self._by_client: weakref.WeakKeyDictionary[
            object, dict[str, weakref.WeakSet[asyncio.Event]]] = weakref.WeakKeyDictionary()

    def watch(self, client: object, event: asyncio.Event, account: str = "") -> None:
        accounts = self._by_client.setdefault(client, {})
        for events in accounts.values():
            events.discard(event)
        accounts.setdefault(account, weakref.WeakSet()).add(event)

    def wake(self, client: object, account: str | None = None, *, after: float = 0.0) -> None:
        """Set the events of `account`'s schedulers (None: every one), `after` seconds on."""
        accounts = self._by_client.get(client, {})
        events = [event for name, watching in list(accounts.items())
                  if account is None or name in ("", account) for event in list(watching)]
        for event in events:
            if after <= 0:
                event.set()
            else:
                asyncio.get_running_loop().call_later(after, event.set)


_CATCHUP_WAKES = _CatchupWakes()
# Reads end this often: the client's health-check PING still goes out, and a stop that redis-py
# swallowed inside a read is seen within this time (`raise_if_cancelling` after each read).
CATCHUP_LISTEN_S = 1.0
RESUBSCRIBE_S = 1.0  # after the subscription failed (Redis away)


def watch_catchups(redis: Redis, wake: asyncio.Event, account: str = "") -> None:
    """Have `announce_catchup` of `account` ("": of any) on this very client set `wake`
    directly (no Redis round trip); a second call moves it to another account."""
    _CATCHUP_WAKES.watch(redis, wake, account)


def wake_local_schedulers(redis: Redis, *, after: float) -> None:
    """Wake this instance's schedulers (`watch_catchups`) `after` seconds from now: a push
    deferred to the end of its interval is released by the first tick after that end, which
    must not be the next poll's (up to `scheduler.POLL_S` later). Only a hint, like a wake."""
    _CATCHUP_WAKES.wake(redis, after=after)


async def announce_catchup(redis: Redis, account_id: str) -> None:
    """Wake the schedulers for a new catch-up flag: this instance's at once (`watch_catchups`),
    every instance's through `PUBLISH reconcile:catchup-wake`. Only a hint: the flag is the
    truth, and a scheduler that missed the signal takes the flag at its next poll."""
    _CATCHUP_WAKES.wake(redis, account_id)
    await redis.publish(keys.CATCHUP_WAKE_CHANNEL, account_id)


async def relay_catchup_announcements(redis: Redis, wake: asyncio.Event | None = None) -> None:
    """Set `wake` (without one: wake the schedulers of the announced account watching this
    client, `watch_catchups`) on every `announce_catchup` of any instance, until cancelled or a
    RedisError. The subscription holds its own connection, closed on the way out. Also once
    subscribed (every scheduler): whatever was announced before that never reached us."""
    await initialized(redis)  # a cluster client's pub/sub needs its slot table

    def woken(account: str | None) -> None:
        if wake is not None:
            wake.set()
        else:
            _CATCHUP_WAKES.wake(redis, account)

    async with redis.pubsub(ignore_subscribe_messages=True) as sub:
        await sub.subscribe(keys.CATCHUP_WAKE_CHANNEL)
        woken(None)
        while True:
            message = await sub.get_message(ignore_subscribe_messages=True,
                                            timeout=CATCHUP_LISTEN_S)
            raise_if_cancelling()
            if message is not None:
                woken(text_of(message.get("data")))


@dataclass
class _Relay:
    task: asyncio.Task[None]
    users: int = 0


_RELAYS: dict[int, _Relay] = {}  # id(the Redis client) → its one relay


@contextlib.asynccontextmanager
async def catchup_wakes(redis: Redis, wake: asyncio.Event) -> AsyncIterator[None]:
    """While inside, `wake` is set on every catch-up announcement: this instance's at once
    (`watch_catchups`), every instance's through one subscription for all the schedulers of
    this client (`relay_catchup_announcements`, started by the first, stopped with the last).
    One per account's scheduler held a connection each of the client's pool of 100, which
    ran dry near 75 accounts: every Redis call of the instance failed (issue #37)."""
    watch_catchups(redis, wake)
    relay = _RELAYS.get(id(redis))
    if relay is None:
        relay = _RELAYS[id(redis)] = _Relay(asyncio.create_task(
            every(RESUBSCRIBE_S, lambda: relay_catchup_announcements(redis), log,
                  "catch-up wake subscription"), name="catch-up-wake"))
    relay.users += 1
    try:
        yield
    finally:
        relay.users -= 1
        if relay.users == 0:
            del _RELAYS[id(redis)]
            await cancel(relay.task)  # closes the subscription's connection
