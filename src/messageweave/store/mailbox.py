"""Redis operations of the mailbox side: new-mail enqueue, the reconcile lock and cursor, the
built-in schedule slots, the catch-up flag and the push subscription keys.

Every multi-key change that must be atomic is one Lua script, defined here next to its caller.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from messageweave.store import keys, scripts
from messageweave.store.redis import Redis

STREAM_JMAP_MAXLEN = 100_000


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        return value.decode()
    return value if isinstance(value, str) else None

# KEYS: dedup:jmap:{account}:{email}, stalwart:jmap   ARGV: ttl, account_id, email_id
# → 1 when enqueued, 0 when this email was already claimed (within the dedup TTL).
CLAIM_DEDUP_AND_ENQUEUE = """
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then
  return 0
end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*',
           'account_id', ARGV[2], 'email_id', ARGV[3])
return 1
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


async def enqueue_new_mail(redis: Redis, account_id: str, email_id: str) -> bool:
    """Claim `dedup:jmap:{account}:{email}` and append `{account_id, email_id}` to
    `stalwart:jmap`, atomically. False when the email was already enqueued (deduplicated)."""
    result = await redis.eval(
        CLAIM_DEDUP_AND_ENQUEUE, 2, keys.dedup_jmap(account_id, email_id), keys.STREAM_JMAP,
        keys.DEDUP_TTL_S, account_id, email_id, STREAM_JMAP_MAXLEN,
    )
    return int(result) == 1


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
    try:
        mark = int(watermark) if watermark is not None else None
    except ValueError:
        mark = None
    return CursorState(_text(cursor), mark)


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


def push_register_lock(redis: Redis, url_digest: str) -> Lock:
    return Lock(redis, keys.push_register_lock(url_digest), keys.PUSH_REGISTER_LOCK_TTL_S)


async def registration_for(redis: Redis, url_digest: str) -> str | None:
    return _text(await redis.get(keys.push_registration(url_digest)))


async def current_registration(redis: Redis) -> Registration | None:
    return _decode_registration(_text(await redis.get(keys.PUSH_REGISTRATION_CURRENT)))


async def record_registration(redis: Redis, reg: Registration) -> None:
    """After PushSubscription/set create: id, pending status, URL mapping, current pointer."""
    async with redis.pipeline(transaction=True) as pipe:
        pipe.set(keys.PUSH_SUBSCRIPTION_ID, reg.subscription_id)
        pipe.set(keys.push_subscription_status(reg.subscription_id), "pending",
                 ex=keys.PUSH_STATUS_PENDING_TTL_S)
        pipe.set(keys.push_registration(reg.url_digest), reg.subscription_id,
                 ex=keys.PUSH_REGISTRATION_TTL_S)
        pipe.set(keys.PUSH_REGISTRATION_CURRENT, _encode_registration(reg),
                 ex=keys.PUSH_REGISTRATION_TTL_S)
        await pipe.execute()


async def forget_registration(redis: Redis, reg: Registration) -> None:
    """After the subscription is gone: status `disabled`, digest and mapping deleted, and the
    current pointer too when it names this registration."""
    async with redis.pipeline(transaction=True) as pipe:
        pipe.set(keys.push_subscription_status(reg.subscription_id), "disabled",
                 ex=keys.PUSH_STATUS_DISABLED_TTL_S)
        pipe.delete(keys.push_subscription(reg.subscription_id))
        pipe.delete(keys.push_registration(reg.url_digest))
        await pipe.execute()
    current = await current_registration(redis)
    if current == reg:
        await redis.delete(keys.PUSH_REGISTRATION_CURRENT)
    if await redis.get(keys.PUSH_SUBSCRIPTION_ID) == reg.subscription_id:
        await redis.delete(keys.PUSH_SUBSCRIPTION_ID)


async def is_known_subscription(redis: Redis, subscription_id: str) -> bool:
    """A subscription we created and still track (the latest id or a live status key)."""
    latest, status = await redis.mget(
        keys.PUSH_SUBSCRIPTION_ID, keys.push_subscription_status(subscription_id)
    )
    return latest == subscription_id or status in ("pending", "verified")


async def verified_digest(redis: Redis, subscription_id: str) -> str | None:
    return _text(await redis.get(keys.push_subscription(subscription_id)))


async def claim_verify_slot(redis: Redis, subscription_id: str) -> bool:
    return bool(await redis.set(keys.ratelimit_push_verify(subscription_id), "1", nx=True,
                                ex=keys.PUSH_VERIFY_RATELIMIT_TTL_S))


async def record_verified(redis: Redis, subscription_id: str, code_digest: str) -> None:
    async with redis.pipeline(transaction=True) as pipe:
        pipe.set(keys.push_subscription(subscription_id), code_digest,
                 ex=keys.PUSH_VERIFIED_TTL_S)
        pipe.set(keys.push_subscription_status(subscription_id), "verified",
                 ex=keys.PUSH_VERIFIED_TTL_S)
        await pipe.execute()


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
