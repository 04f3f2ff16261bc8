"""Redis operations of the mailbox side: new-mail enqueue, the reconcile lock and cursor, the
built-in schedule slots, the catch-up flag (and the signal that wakes the schedulers for it) and
the push subscription keys.

Every multi-key change that must be atomic is one Lua script, defined here next to its caller.
"""

from __future__ import annotations

import asyncio
import secrets
import weakref
from dataclasses import dataclass

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
CATCHUP_LISTEN_S = 5.0  # reads end this often, so the client's health-check PING still goes out


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
            if await sub.get_message(ignore_subscribe_messages=True,
                                     timeout=CATCHUP_LISTEN_S) is not None:
                wake.set()


# ------------------------------------------------------------------------------- push


@dataclass(frozen=True)
class Registration:
    url_digest: str
    subscription_id: str


def _encode_registration(reg: Registration) -> str:
    return f"{reg.url_digest}:{reg.subscription_id}"


def _decode_registration(raw: str | None) -> Registration | None:
    if not raw or ":" not in raw:
        return None
    digest, sub_id = raw.split(":", 1)
    return Registration(digest, sub_id) if digest and sub_id else None


@dataclass(frozen=True)
class Lifecycle:
    """What we know of the current subscription (`push:lifecycle`); times are Unix seconds.

    `expires` None = no expiry known (the server set none, or it was never told to us);
    `verified` None = no PushVerification completed for this subscription id yet;
    `failure` = why the last maintenance pass could not keep it alive (None = it could)."""

    registration: Registration
    url: str | None = None
    expires: int | None = None
    granted: int | None = None
    created: int | None = None
    verified: int | None = None
    failure: str | None = None


def _lifecycle_fields(
    reg: Registration, *, url: str | None, expires: int | None, now: float | None
) -> list[str]:
    fields = ["id", reg.subscription_id, "digest", reg.url_digest,
              "expires", "" if expires is None else str(expires)]
    if now is not None:
        fields += ["created", str(int(now)), "granted", str(int(now))]
    if url is not None:
        fields += ["url", url]
    return fields


# KEYS: push:subscription:id, push:subscription:{id}:status, push:registration:{digest},
#       push:registration:current, push:lifecycle
# ARGV: id, pending TTL, encoded registration, lifecycle field/value pairs…
RECORD_REGISTRATION = """
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], 'pending', 'EX', ARGV[2])
redis.call('SET', KEYS[3], ARGV[1])
redis.call('SET', KEYS[4], ARGV[3])
redis.call('DEL', KEYS[5])
redis.call('HSET', KEYS[5], unpack(ARGV, 4))
return 1
"""

# KEYS: push:registration:current, push:subscription:id, status of the new id, status of the
#       old id, push:subscription:{old id}, push:registration:{digest}, push:lifecycle
# ARGV: expected current, new current, new id, pending TTL, disabled TTL, lifecycle pairs…
# → 1 when replaced, 0 when the registration changed meanwhile (nothing written).
REPLACE_SUBSCRIPTION = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], ARGV[3])
redis.call('SET', KEYS[3], 'pending', 'EX', ARGV[4])
redis.call('SET', KEYS[4], 'disabled', 'EX', ARGV[5])
redis.call('DEL', KEYS[5])
redis.call('SET', KEYS[6], ARGV[3])
redis.call('DEL', KEYS[7])
redis.call('HSET', KEYS[7], unpack(ARGV, 6))
return 1
"""

# KEYS: push:registration:current, push:lifecycle
# ARGV: expected current, n, n field names to delete, then field/value pairs to set
# → 1 when written, 0 when the registration changed meanwhile (nothing written).
UPDATE_LIFECYCLE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local n = tonumber(ARGV[2])
for i = 3, 2 + n do
  redis.call('HDEL', KEYS[2], ARGV[i])
end
if #ARGV > 2 + n then
  redis.call('HSET', KEYS[2], unpack(ARGV, 3 + n))
end
return 1
"""

# KEYS: push:subscription:{id}, push:subscription:{id}:status, push:lifecycle
# ARGV: code digest, TTL, id, now
RECORD_VERIFIED = """
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
redis.call('SET', KEYS[2], 'verified', 'EX', ARGV[2])
if redis.call('HGET', KEYS[3], 'id') == ARGV[3] then
  redis.call('HSET', KEYS[3], 'verified', ARGV[4])
end
return 1
"""

# KEYS: push:subscription:{id}:status, push:subscription:{id}, push:registration:{digest},
#       push:registration:current, push:subscription:id, push:lifecycle
# ARGV: disabled TTL, encoded registration, id
FORGET_REGISTRATION = """
redis.call('SET', KEYS[1], 'disabled', 'EX', ARGV[1])
redis.call('DEL', KEYS[2])
if redis.call('GET', KEYS[3]) == ARGV[3] then
  redis.call('DEL', KEYS[3])
end
if redis.call('GET', KEYS[4]) == ARGV[2] then
  redis.call('DEL', KEYS[4], KEYS[6])
end
if redis.call('GET', KEYS[5]) == ARGV[3] then
  redis.call('DEL', KEYS[5])
end
return 1
"""


def push_register_lock(redis: Redis, url_digest: str) -> Lock:
    return Lock(redis, keys.push_register_lock(url_digest), keys.PUSH_REGISTER_LOCK_TTL_S)


async def registration_for(redis: Redis, url_digest: str) -> str | None:
    return text_of(await redis.get(keys.push_registration(url_digest)))


async def current_registration(redis: Redis) -> Registration | None:
    return _decode_registration(text_of(await redis.get(keys.PUSH_REGISTRATION_CURRENT)))


async def record_registration(
    redis: Redis, reg: Registration, *, url: str | None = None, expires: int | None = None,
    now: float | None = None,
) -> None:
    """After PushSubscription/create: id, pending status, URL mapping, current pointer and a
    fresh lifecycle (`url`, the granted `expires` and the create time `now`, when known),
    atomically and without EX."""
    await redis.eval(
        RECORD_REGISTRATION, 5, keys.PUSH_SUBSCRIPTION_ID,
        keys.push_subscription_status(reg.subscription_id), keys.push_registration(reg.url_digest),
        keys.PUSH_REGISTRATION_CURRENT, keys.PUSH_LIFECYCLE,
        reg.subscription_id, keys.PUSH_STATUS_PENDING_TTL_S, _encode_registration(reg),
        *_lifecycle_fields(reg, url=url, expires=expires, now=now),
    )


async def replace_subscription(
    redis: Redis, old: Registration, new: Registration, *, url: str, expires: int | None,
    now: float,
) -> bool:
    """Point the registration at a re-created subscription (pending verification again), only
    while it still names `old`. False = the registration changed meanwhile; nothing written."""
    result = await redis.eval(
        REPLACE_SUBSCRIPTION, 7, keys.PUSH_REGISTRATION_CURRENT, keys.PUSH_SUBSCRIPTION_ID,
        keys.push_subscription_status(new.subscription_id),
        keys.push_subscription_status(old.subscription_id),
        keys.push_subscription(old.subscription_id), keys.push_registration(new.url_digest),
        keys.PUSH_LIFECYCLE,
        _encode_registration(old), _encode_registration(new), new.subscription_id,
        keys.PUSH_STATUS_PENDING_TTL_S, keys.PUSH_STATUS_DISABLED_TTL_S,
        *_lifecycle_fields(new, url=url, expires=expires, now=now),
    )
    return int(result) == 1


async def update_lifecycle(
    redis: Redis, reg: Registration, values: dict[str, str | None]
) -> bool:
    """Set (str) or delete (None) lifecycle fields, only while `reg` is the current
    registration. False = it is not (nothing written)."""
    drop = [name for name, value in values.items() if value is None]
    pairs = [part for name, value in values.items() if value is not None
             for part in (name, value)]
    result = await redis.eval(
        UPDATE_LIFECYCLE, 2, keys.PUSH_REGISTRATION_CURRENT, keys.PUSH_LIFECYCLE,
        _encode_registration(reg), len(drop), *drop,
        "id", reg.subscription_id, "digest", reg.url_digest, *pairs,
    )
    return int(result) == 1


async def read_lifecycle(redis: Redis) -> Lifecycle | None:
    """The current registration and its lifecycle; None when push is not registered. A
    lifecycle that names another subscription (or none: a registration older than the
    lifecycle) contributes nothing but the registration."""
    async with redis.pipeline(transaction=True) as pipe:
        pipe.get(keys.PUSH_REGISTRATION_CURRENT)
        pipe.hgetall(keys.PUSH_LIFECYCLE)
        raw_current, raw_fields = await pipe.execute()
    reg = _decode_registration(text_of(raw_current))
    if reg is None:
        return None
    fields = {text_of(k) or "": text_of(v) for k, v in (raw_fields or {}).items()}
    if fields.get("id") != reg.subscription_id:
        return Lifecycle(reg)
    return Lifecycle(
        reg, url=fields.get("url") or None, expires=int_of(fields.get("expires")),
        granted=int_of(fields.get("granted")), created=int_of(fields.get("created")),
        verified=int_of(fields.get("verified")), failure=fields.get("failure") or None,
    )


async def forget_registration(redis: Redis, reg: Registration) -> None:
    """After the subscription is gone: status `disabled`, digest deleted, and the mapping,
    current pointer, lifecycle and latest id too while they still name this registration."""
    await redis.eval(
        FORGET_REGISTRATION, 6, keys.push_subscription_status(reg.subscription_id),
        keys.push_subscription(reg.subscription_id), keys.push_registration(reg.url_digest),
        keys.PUSH_REGISTRATION_CURRENT, keys.PUSH_SUBSCRIPTION_ID, keys.PUSH_LIFECYCLE,
        keys.PUSH_STATUS_DISABLED_TTL_S, _encode_registration(reg), reg.subscription_id,
    )


async def is_known_subscription(redis: Redis, subscription_id: str) -> bool:
    """A subscription we created and still track (the latest id or a live status key)."""
    latest, status = await redis.mget(
        keys.PUSH_SUBSCRIPTION_ID, keys.push_subscription_status(subscription_id)
    )
    return latest == subscription_id or status in ("pending", "verified")


async def verified_digest(redis: Redis, subscription_id: str) -> str | None:
    return text_of(await redis.get(keys.push_subscription(subscription_id)))


async def claim_verify_slot(redis: Redis, subscription_id: str) -> bool:
    return bool(await redis.set(keys.ratelimit_push_verify(subscription_id), "1", nx=True,
                                ex=keys.PUSH_VERIFY_RATELIMIT_TTL_S))


async def record_verified(
    redis: Redis, subscription_id: str, code_digest: str, *, now: float
) -> None:
    """The code digest and status `verified` (EX 300), and the verification time in the
    lifecycle when it is this subscription's."""
    await redis.eval(
        RECORD_VERIFIED, 3, keys.push_subscription(subscription_id),
        keys.push_subscription_status(subscription_id), keys.PUSH_LIFECYCLE,
        code_digest, keys.PUSH_VERIFIED_TTL_S, subscription_id, int(now),
    )


async def record_state_change(redis: Redis, now: float) -> None:
    await redis.set(keys.PUSH_LAST_STATE_CHANGE, str(int(now)))


async def last_state_change(redis: Redis) -> int | None:
    return int_of(text_of(await redis.get(keys.PUSH_LAST_STATE_CHANGE)))


async def record_orphan(redis: Redis, subscription_id: str, request_id: str) -> None:
    await redis.set(keys.push_orphan(subscription_id), request_id, ex=keys.PUSH_ORPHAN_TTL_S)


async def orphans(redis: Redis, limit: int = 100) -> list[str]:
    """Subscription ids recorded under `push:orphan:*` (at most `limit`)."""
    prefix = keys.push_orphan("")
    found: list[str] = []
    async for key in redis.scan_iter(match=prefix + "*", count=100):
        found.append(str(key)[len(prefix):])
        if len(found) >= limit:
            break
    return found


async def drop_orphan(redis: Redis, subscription_id: str) -> None:
    await redis.delete(keys.push_orphan(subscription_id))
