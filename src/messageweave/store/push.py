"""Redis operations of the JMAP push subscription: the registration, its lifecycle hash (with
the digest of the callback token), the verification state, StateChange arrivals, the
coalescing of push-triggered catch-ups and orphaned subscriptions.

Every multi-key change that must be atomic is one Lua script, defined here next to its caller.
"""

from __future__ import annotations

from dataclasses import dataclass

from messageweave.store import keys
from messageweave.store.locks import Lock
from messageweave.store.redis import Redis, int_of, text_of
from messageweave.store.scripts import Script


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
    `failure` = why the last maintenance pass could not keep it alive (None = it could);
    `token` = the SHA-256 hex of the token in the subscription's callback URL (None: created
    before callback tokens, issue #23; maintenance re-creates it)."""

    registration: Registration
    url: str | None = None
    expires: int | None = None
    granted: int | None = None
    created: int | None = None
    verified: int | None = None
    failure: str | None = None
    token: str | None = None


@dataclass(frozen=True)
class Callback:
    """What `/push/jmap` checks a post against (`callback`): the current subscription's token
    digest and whether its PushVerification completed."""

    token_digest: str | None
    verified: bool


def _lifecycle_fields(
    reg: Registration, *, url: str | None, expires: int | None, now: float | None,
    token_digest: str | None = None,
) -> list[str]:
    fields = ["id", reg.subscription_id, "digest", reg.url_digest,
              "expires", "" if expires is None else str(expires)]
    if now is not None:
        fields += ["created", str(int(now)), "granted", str(int(now))]
    if url is not None:
        fields += ["url", url]
    if token_digest is not None:
        fields += ["token", token_digest]
    return fields


# KEYS: latest (push:subscription:id), status (push:subscription:{id}:status),
#       registration (push:registration:{digest}), current (push:registration:current),
#       lifecycle (push:lifecycle)
# ARGV: id, pending_ttl, encoded (the encoded registration), fields* (lifecycle field/value
#       pairs) → 1
RECORD_REGISTRATION = Script("""
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], 'pending', 'EX', ARGV[2])
redis.call('SET', KEYS[3], ARGV[1])
redis.call('SET', KEYS[4], ARGV[3])
redis.call('DEL', KEYS[5])
redis.call('HSET', KEYS[5], unpack(ARGV, 4))
return 1
""", keys=("latest", "status", "registration", "current", "lifecycle"),
    args=("id", "pending_ttl", "encoded", "fields*"))

# KEYS: current (push:registration:current), latest (push:subscription:id), new_status (of the
#       new id), old_status (of the old id), old_digest (push:subscription:{old id}),
#       registration (push:registration:{digest}), lifecycle (push:lifecycle)
# ARGV: expected (the current registration), current (the new one), id (the new id),
#       pending_ttl, disabled_ttl, fields* (lifecycle field/value pairs)
# → 1 when replaced, 0 when the registration changed meanwhile (nothing written).
REPLACE_SUBSCRIPTION = Script("""
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
""", keys=("current", "latest", "new_status", "old_status", "old_digest", "registration",
           "lifecycle"),
    args=("expected", "current", "id", "pending_ttl", "disabled_ttl", "fields*"))

# KEYS: current (push:registration:current), lifecycle (push:lifecycle)
# ARGV: expected (the current registration), drops (n), changes* (n field names to delete, then
#       field/value pairs to set)
# → 1 when written, 0 when the registration changed meanwhile (nothing written).
UPDATE_LIFECYCLE = Script("""
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
""", keys=("current", "lifecycle"), args=("expected", "drops", "changes*"))

# KEYS: digest (push:subscription:{id}), status (push:subscription:{id}:status),
#       lifecycle (push:lifecycle)
# ARGV: code_digest, ttl, id, now → 1
RECORD_VERIFIED = Script("""
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
redis.call('SET', KEYS[2], 'verified', 'EX', ARGV[2])
if redis.call('HGET', KEYS[3], 'id') == ARGV[3] then
  redis.call('HSET', KEYS[3], 'verified', ARGV[4])
end
return 1
""", keys=("digest", "status", "lifecycle"), args=("code_digest", "ttl", "id", "now"))

# KEYS: status (push:subscription:{id}:status), digest (push:subscription:{id}),
#       registration (push:registration:{digest}), current (push:registration:current),
#       latest (push:subscription:id), lifecycle (push:lifecycle)
# ARGV: disabled_ttl, encoded (the encoded registration), id → 1
FORGET_REGISTRATION = Script("""
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
""", keys=("status", "digest", "registration", "current", "latest", "lifecycle"),
    args=("disabled_ttl", "encoded", "id"))


def push_register_lock(redis: Redis, url_digest: str) -> Lock:
    return Lock(redis, keys.push_register_lock(url_digest), keys.PUSH_REGISTER_LOCK_TTL_S)


async def registration_for(redis: Redis, url_digest: str) -> str | None:
    return text_of(await redis.get(keys.push_registration(url_digest)))


async def current_registration(redis: Redis) -> Registration | None:
    return _decode_registration(text_of(await redis.get(keys.PUSH_REGISTRATION_CURRENT)))


async def record_registration(
    redis: Redis, reg: Registration, *, url: str | None = None, expires: int | None = None,
    now: float | None = None, token_digest: str | None = None,
) -> None:
    """After PushSubscription/create: id, pending status, URL mapping, current pointer and a
    fresh lifecycle (`url`, the granted `expires`, the create time `now` and the callback
    token's digest, when known), atomically and without EX."""
    await RECORD_REGISTRATION(redis, keys={
        "latest": keys.PUSH_SUBSCRIPTION_ID,
        "status": keys.push_subscription_status(reg.subscription_id),
        "registration": keys.push_registration(reg.url_digest),
        "current": keys.PUSH_REGISTRATION_CURRENT, "lifecycle": keys.PUSH_LIFECYCLE,
    }, args={
        "id": reg.subscription_id, "pending_ttl": keys.PUSH_STATUS_PENDING_TTL_S,
        "encoded": _encode_registration(reg),
        "fields": _lifecycle_fields(reg, url=url, expires=expires, now=now,
                                    token_digest=token_digest),
    })


async def replace_subscription(
    redis: Redis, old: Registration, new: Registration, *, url: str, expires: int | None,
    now: float, token_digest: str | None = None,
) -> bool:
    """Point the registration at a re-created subscription (pending verification again), only
    while it still names `old`. False = the registration changed meanwhile; nothing written."""
    result = await REPLACE_SUBSCRIPTION(redis, keys={
        "current": keys.PUSH_REGISTRATION_CURRENT, "latest": keys.PUSH_SUBSCRIPTION_ID,
        "new_status": keys.push_subscription_status(new.subscription_id),
        "old_status": keys.push_subscription_status(old.subscription_id),
        "old_digest": keys.push_subscription(old.subscription_id),
        "registration": keys.push_registration(new.url_digest),
        "lifecycle": keys.PUSH_LIFECYCLE,
    }, args={
        "expected": _encode_registration(old), "current": _encode_registration(new),
        "id": new.subscription_id, "pending_ttl": keys.PUSH_STATUS_PENDING_TTL_S,
        "disabled_ttl": keys.PUSH_STATUS_DISABLED_TTL_S,
        "fields": _lifecycle_fields(new, url=url, expires=expires, now=now,
                                    token_digest=token_digest),
    })
    return int(result) == 1


async def update_lifecycle(
    redis: Redis, reg: Registration, values: dict[str, str | None]
) -> bool:
    """Set (str) or delete (None) lifecycle fields, only while `reg` is the current
    registration. False = it is not (nothing written)."""
    drop = [name for name, value in values.items() if value is None]
    pairs = [part for name, value in values.items() if value is not None
             for part in (name, value)]
    result = await UPDATE_LIFECYCLE(
        redis, keys={"current": keys.PUSH_REGISTRATION_CURRENT, "lifecycle": keys.PUSH_LIFECYCLE},
        args={"expected": _encode_registration(reg), "drops": len(drop), "changes": [
            *drop, "id", reg.subscription_id, "digest", reg.url_digest, *pairs]})
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
        token=fields.get("token") or None,
    )


async def callback(redis: Redis) -> Callback:
    """The current subscription's token digest and verification (one HMGET; nothing when
    push is not registered: a disable deletes the lifecycle)."""
    token, verified = await redis.hmget(keys.PUSH_LIFECYCLE, ["token", "verified"])
    return Callback(text_of(token) or None, bool(text_of(verified)))


async def forget_registration(redis: Redis, reg: Registration) -> None:
    """After the subscription is gone: status `disabled`, digest deleted, and the mapping,
    current pointer, lifecycle and latest id too while they still name this registration."""
    await FORGET_REGISTRATION(redis, keys={
        "status": keys.push_subscription_status(reg.subscription_id),
        "digest": keys.push_subscription(reg.subscription_id),
        "registration": keys.push_registration(reg.url_digest),
        "current": keys.PUSH_REGISTRATION_CURRENT, "latest": keys.PUSH_SUBSCRIPTION_ID,
        "lifecycle": keys.PUSH_LIFECYCLE,
    }, args={"disabled_ttl": keys.PUSH_STATUS_DISABLED_TTL_S,
             "encoded": _encode_registration(reg), "id": reg.subscription_id})


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
    await RECORD_VERIFIED(redis, keys={
        "digest": keys.push_subscription(subscription_id),
        "status": keys.push_subscription_status(subscription_id),
        "lifecycle": keys.PUSH_LIFECYCLE,
    }, args={"code_digest": code_digest, "ttl": keys.PUSH_VERIFIED_TTL_S, "id": subscription_id,
             "now": int(now)})


async def record_state_change(redis: Redis, now: float) -> None:
    await redis.set(keys.PUSH_LAST_STATE_CHANGE, str(int(now)))


# KEYS: due (push:catchup:due), deferred (push:catchup:deferred),
#       catchup (reconcile:catchup:{account})
# ARGV: now (Unix s), interval, ttl (of the three keys)
# → 1: a catch-up newly flagged (announce it); 0: one was already pending, or the push is
#   already deferred; `due` (a string of Unix seconds): the push is newly deferred to then.
#   A `due` more than two intervals ahead is a clock that went back: it does not hold pushes
#   off. (One interval is not enough: a `now` read a moment before another caller's release,
#   on this instance or another one, finds `due` a hair more than one interval ahead.)
CLAIM_PUSH_CATCHUP = Script("""
local now, interval = tonumber(ARGV[1]), tonumber(ARGV[2])
local due = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if now >= due or due - now > 2 * interval then
  redis.call('SET', KEYS[1], tostring(now + interval), 'EX', ARGV[3])
  redis.call('DEL', KEYS[2])
  if redis.call('SET', KEYS[3], '1', 'NX', 'EX', ARGV[3]) then
    return 1
  end
  return 0
end
if redis.call('SET', KEYS[2], '1', 'NX', 'EX', ARGV[3]) then
  return redis.call('GET', KEYS[1])
end
return 0
""", keys=("due", "deferred", "catchup"), args=("now", "interval", "ttl"))

# KEYS: due, deferred, catchup (as CLAIM_PUSH_CATCHUP's)   ARGV: now, interval, ttl
# → 1 when a deferred push became a catch-up now (its interval has passed), else 0. The clock
#   that went back is told as in CLAIM_PUSH_CATCHUP (more than two intervals).
RELEASE_DEFERRED_CATCHUP = Script("""
if redis.call('EXISTS', KEYS[2]) == 0 then
  return 0
end
local now, interval = tonumber(ARGV[1]), tonumber(ARGV[2])
local due = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if now < due and due - now <= 2 * interval then
  return 0
end
redis.call('DEL', KEYS[2])
redis.call('SET', KEYS[1], tostring(now + interval), 'EX', ARGV[3])
redis.call('SET', KEYS[3], '1', 'NX', 'EX', ARGV[3])
return 1
""", keys=("due", "deferred", "catchup"), args=("now", "interval", "ttl"))


@dataclass(frozen=True)
class CatchupClaim:
    """What `claim_push_catchup` did: `scheduled` a catch-up (newly flagged), or deferred one to
    `deferred_until` (Unix s, the interval's end), or neither (one was already pending or
    deferred)."""

    scheduled: bool = False
    deferred_until: float | None = None


async def claim_push_catchup(redis: Redis, account_id: str, *, now: float, interval: float
                             ) -> CatchupClaim:
    """Ask for a push-triggered catch-up, at most one per `interval` (`CLAIM_PUSH_CATCHUP`)."""
    answer = await CLAIM_PUSH_CATCHUP(redis, keys=_catchup_keys(account_id),
                                      args=_catchup_args(now, interval))
    if isinstance(answer, bytes | str):
        return CatchupClaim(deferred_until=float(answer))
    return CatchupClaim(scheduled=answer == 1)


async def release_deferred_catchup(redis: Redis, account_id: str, *, now: float,
                                   interval: float) -> bool:
    """Turn a deferred push into a catch-up once its interval has passed; True when it did."""
    return bool(await RELEASE_DEFERRED_CATCHUP(redis, keys=_catchup_keys(account_id),
                                               args=_catchup_args(now, interval)))


def _catchup_keys(account_id: str) -> dict[str, str]:
    return {"due": keys.PUSH_CATCHUP_DUE, "deferred": keys.PUSH_CATCHUP_DEFERRED,
            "catchup": keys.reconcile_catchup(account_id)}


def _catchup_args(now: float, interval: float) -> dict[str, str | int]:
    return {"now": repr(float(now)), "interval": repr(float(interval)),
            "ttl": keys.CATCHUP_TTL_S}


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
