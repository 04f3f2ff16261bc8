"""Redis operations of the mailbox side: new-mail enqueue, the reconcile lock and cursor, the
built-in schedule slots, and the catch-up flag (and the signal that wakes the schedulers for it).
The push subscription keys are `messageweave.store.push`.

Every multi-key change that must be atomic is one Lua script, defined here next to its caller.
"""

from __future__ import annotations

import asyncio
import secrets
import weakref
from dataclasses import dataclass

from messageweave.aio import raise_if_cancelling
from messageweave.store import keys, scripts
from messageweave.store.redis import Redis, int_of, text_of

STREAM_JMAP_MAXLEN = 100_000


# KEYS: dedup:jmap:{account}:{email}, stalwart:jmap   ARGV: ttl, account_id, email_id, maxlen
# → the new entry id, or false when this email was already claimed (within the dedup TTL).
# The claim holds the entry id (not just "1") so the gap auditor can follow a mail to its entry;
# the gap auditor's own claim (`messageweave.store.gaps.CHECK_AND_CLAIM`) runs on the same key.
CLAIM_DEDUP_AND_ENQUEUE = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  return false
end
local id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*',
                      'account_id', ARGV[2], 'email_id', ARGV[3])
redis.call('SET', KEYS[1], id, 'EX', ARGV[1])
return id
"""

# KEYS: lock:reconcile, state:jmap:since, state:jmap:watermark
# ARGV: owner, cursor, watermark ("" = leave it)
# → 1 when saved, 0 when the lease is lost (nothing written).
SAVE_CURSOR = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[2], ARGV[2])
if ARGV[3] ~= '' then
  redis.call('SET', KEYS[3], ARGV[3])
end
return 1
"""


NOT_NOTIFIED = "not_notified"


async def mark_not_notified(redis: Redis, account_id: str, email_ids: list[str]) -> None:
    """Claim `dedup:jmap:{account}:{email}` for created mail the reconcile saw outside the
    notify mailboxes (e.g. in Junk), with the value `not_notified`, when nothing claimed it yet.
    A mail moved into the inbox later is then neither notified by the reconcile (only created
    mail notifies) nor reported missing by the gap auditor (the claim is not an entry id)."""
    if not email_ids:
        return
    async with redis.pipeline(transaction=False) as pipe:
        for email_id in email_ids:
            pipe.set(keys.dedup_jmap(account_id, email_id), NOT_NOTIFIED, nx=True,
                     ex=keys.DEDUP_JMAP_TTL_S)
        await pipe.execute()


async def enqueue_new_mail(redis: Redis, account_id: str, email_id: str) -> str | None:
    """Claim `dedup:jmap:{account}:{email}` and append `{account_id, email_id}` to
    `stalwart:jmap`, atomically. The new entry id, or None when the email was already enqueued
    (deduplicated)."""
    result = await redis.eval(
        CLAIM_DEDUP_AND_ENQUEUE, 2, keys.dedup_jmap(account_id, email_id), keys.STREAM_JMAP,
        keys.DEDUP_JMAP_TTL_S, account_id, email_id, STREAM_JMAP_MAXLEN,
    )
    return text_of(result)


# KEYS: stalwart:jmap, then dedup:jmap:{account}:{email} per mail   ARGV: ttl, account_id,
# maxlen, then the email ids (in KEYS order) → how many were enqueued. Per mail the claim + XADD
# of `CLAIM_DEDUP_AND_ENQUEUE`; a mail claimed already (say by a pass that crashed) is skipped.
CLAIM_DEDUP_AND_ENQUEUE_MANY = """
local enqueued = 0
for n = 2, #KEYS do
  if redis.call('EXISTS', KEYS[n]) == 0 then
    local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], '*',
                          'account_id', ARGV[2], 'email_id', ARGV[n + 2])
    redis.call('SET', KEYS[n], id, 'EX', ARGV[1])
    enqueued = enqueued + 1
  end
end
return enqueued
"""
ENQUEUE_BATCH = 512  # mails per script, so none holds Redis long; a page's go in one round trip


async def enqueue_new_mails(
    redis: Redis, account_id: str, email_ids: list[str], *, batch: int = ENQUEUE_BATCH
) -> int:
    """`enqueue_new_mail` for each of `email_ids`, in order, in one round trip; how many were
    enqueued (a mail already claimed, or named twice, is enqueued once)."""
    async with redis.pipeline(transaction=False) as pipe:
        for chunk in (email_ids[i:i + batch] for i in range(0, len(email_ids), batch)):
            pipe.eval(CLAIM_DEDUP_AND_ENQUEUE_MANY, 1 + len(chunk), keys.STREAM_JMAP,
                      *(keys.dedup_jmap(account_id, e) for e in chunk),
                      keys.DEDUP_JMAP_TTL_S, account_id, STREAM_JMAP_MAXLEN, *chunk)
        return sum(int(n) for n in await pipe.execute())


# A digest entry (issue #16): `{kind: digest, account_id, email_ids}`, the ids space-separated
# (a JMAP id never holds a space, RFC 8620 §1.2), at most `DIGEST_MAX_IDS` of them.
DIGEST_KIND = "digest"
DIGEST_MAX_IDS = 2048

# KEYS: stalwart:jmap, then dedup:jmap:{account}:{email} per mail   ARGV: ttl, account_id,
# maxlen, then the email ids (in KEYS order) → {entry id ('' = none), how many it holds}.
# One entry for every mail of the list nobody claimed yet (a mail claimed already, say by a
# pass that crashed after this script, is left out; one named twice is in it once), and each
# of their claims names that entry, like `CLAIM_DEDUP_AND_ENQUEUE_MANY`'s: the gap auditor
# follows a mail to the digest entry and its terminal record.
CLAIM_DEDUP_AND_ENQUEUE_DIGEST = """
local fresh, picked, names = {}, {}, {}
for n = 2, #KEYS do
  if not fresh[KEYS[n]] and redis.call('EXISTS', KEYS[n]) == 0 then
    fresh[KEYS[n]] = true
    picked[#picked + 1] = n
    names[#names + 1] = ARGV[n + 2]
  end
end
if #picked == 0 then return {'', 0} end
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], '*', 'kind', 'digest',
                      'account_id', ARGV[2], 'email_ids', table.concat(names, ' '))
for _, n in ipairs(picked) do
  redis.call('SET', KEYS[n], id, 'EX', ARGV[1])
end
return {id, #picked}
"""


async def enqueue_digest(redis: Redis, account_id: str,
                         email_ids: list[str]) -> tuple[str | None, int]:
    """One digest entry on `stalwart:jmap` for those of `email_ids` not claimed yet, and their
    claims, atomically: (the entry id or None when every mail was claimed already, how many
    mails it holds). At most `DIGEST_MAX_IDS` ids."""
    if not email_ids:
        return None, 0
    if len(email_ids) > DIGEST_MAX_IDS:
        raise ValueError(f"a digest entry holds at most {DIGEST_MAX_IDS} mails")
    entry, count = await redis.eval(
        CLAIM_DEDUP_AND_ENQUEUE_DIGEST, 1 + len(email_ids), keys.STREAM_JMAP,
        *(keys.dedup_jmap(account_id, e) for e in email_ids),
        keys.DEDUP_JMAP_TTL_S, account_id, STREAM_JMAP_MAXLEN, *email_ids,
    )
    return text_of(entry) or None, int(count)


# ------------------------------------------------------------------------------- lock


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
        result = await self.redis.eval(
            scripts.RENEW_LOCK, 1, self.key, self.owner, self.ttl_s
        )
        return int(result) == 1

    async def release(self) -> None:
        await self.redis.eval(scripts.RELEASE_LOCK, 1, self.key, self.owner)


def reconcile_lock(redis: Redis) -> Lock:
    return Lock(redis, keys.RECONCILE_LOCK, keys.RECONCILE_LOCK_TTL_S)


# ------------------------------------------------------------------------------- cursor


@dataclass(frozen=True)
class CursorState:
    cursor: str | None
    watermark: int | None


async def read_cursor(redis: Redis) -> CursorState:
    cursor, watermark = await redis.mget(keys.RECONCILE_CURSOR, keys.RECONCILE_WATERMARK)
    return CursorState(text_of(cursor), int_of(text_of(watermark)))


async def save_cursor(
    redis: Redis, lock: Lock, cursor: str, watermark: int | None = None
) -> bool:
    """Store the cursor (and watermark) only while `lock` is still held. False = lease lost."""
    result = await redis.eval(
        SAVE_CURSOR, 3, lock.key, keys.RECONCILE_CURSOR, keys.RECONCILE_WATERMARK,
        lock.owner, cursor, "" if watermark is None else str(watermark),
    )
    return int(result) == 1


# ------------------------------------------------------------------------------- schedule


async def claim_slot(redis: Redis, key: str, interval_s: int) -> bool:
    """The instance that sets `key` first runs this interval's job; the others skip it."""
    return bool(await redis.set(key, "1", nx=True, ex=max(1, interval_s)))


async def slot_free(redis: Redis, key: str) -> bool:
    """Whether the slot `claim_slot` would take is free now (no write)."""
    return not await redis.exists(key)


async def request_catchup(redis: Redis, account_id: str) -> bool:
    """Flag one pending catch-up for `account_id`; False when one was already pending."""
    return bool(
        await redis.set(keys.reconcile_catchup(account_id), "1", nx=True, ex=keys.CATCHUP_TTL_S)
    )


async def catchup_pending(redis: Redis, account_id: str) -> bool:
    return bool(await redis.exists(keys.reconcile_catchup(account_id)))


async def take_catchup(redis: Redis, account_id: str) -> bool:
    """Consume the pending catch-up (GETDEL): exactly one instance gets True."""
    return await redis.getdel(keys.reconcile_catchup(account_id)) is not None


# The push handler and the scheduler of one instance share only its Redis client: a wake is
# found by it. Weak, so a closed instance (a test's second one) leaves nothing behind.
_local_wakes: weakref.WeakKeyDictionary[Redis, weakref.WeakSet[asyncio.Event]] = (
    weakref.WeakKeyDictionary())
# Reads end this often: the client's health-check PING still goes out, and a stop that redis-py
# swallowed inside a read is seen within this time (`raise_if_cancelling` after each read).
CATCHUP_LISTEN_S = 1.0


def watch_catchups(redis: Redis, wake: asyncio.Event) -> None:
    """Have `announce_catchup` on this very client set `wake` directly (no Redis round trip)."""
    _local_wakes.setdefault(redis, weakref.WeakSet()).add(wake)


async def announce_catchup(redis: Redis, account_id: str) -> None:
    """Wake the schedulers for a new catch-up flag: this instance's at once (`watch_catchups`),
    every instance's through `PUBLISH reconcile:catchup-wake`. Only a hint: the flag is the
    truth, and a scheduler that missed the signal takes the flag at its next poll."""
    for wake in list(_local_wakes.get(redis, ())):
        wake.set()
    await redis.publish(keys.CATCHUP_WAKE_CHANNEL, account_id)


async def relay_catchup_announcements(redis: Redis, wake: asyncio.Event) -> None:
    """Set `wake` on every `announce_catchup` of any instance, until cancelled or a RedisError.
    The subscription holds its own connection, closed on the way out. `wake` is also set once
    subscribed: whatever was announced before that never reached us."""
    async with redis.pubsub(ignore_subscribe_messages=True) as sub:
        await sub.subscribe(keys.CATCHUP_WAKE_CHANNEL)
        wake.set()
        while True:
            message = await sub.get_message(ignore_subscribe_messages=True,
                                            timeout=CATCHUP_LISTEN_S)
            raise_if_cancelling()
            if message is not None:
                wake.set()
