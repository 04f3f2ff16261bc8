"""The reconcile's state in Redis, per account: its lock (`reconcile_lock`), its cursor and
watermark (`read_cursor`, `save_cursor`), and the built-in schedule's slots (`claim_slot`)."""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass

from messageweave.store import keys
from messageweave.store.keys import AccountKeys
from messageweave.store.locks import Lock
from messageweave.store.redis import Redis, int_of, text_of
from messageweave.store.scripts import Script


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


# KEYS: slot   ARGV: ms (until the slot's end), interval (ms) → {1: claimed (run this interval's
# job) or 0: taken, ms until the slot ends}. A slot taken for longer than one and a half
# `interval`s (the most `slot_ms` gives: the interval was lowered since) is cut to end within it.
CLAIM_SLOT = Script("""
local interval = tonumber(ARGV[2])
if redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[1]) then
  return {1, tonumber(ARGV[1])}
end
local left = redis.call('PTTL', KEYS[1])
if left > interval * 1.5 or left < 0 then
  redis.call('PEXPIRE', KEYS[1], interval)
  left = interval
end
return {0, left}
""", keys=("slot",), args=("ms", "interval"))


@dataclass(frozen=True)
class SlotClaim:
    claimed: bool  # this instance runs the interval's job
    left_s: float  # until the slot ends: nothing to claim before then


def slot_ms(key: str, interval_s: int, now: float) -> int:
    """How long a slot claimed at `now` (Unix s) lasts: until its key's own phase of the
    interval (a hash of the key), half an interval at least (so up to one and a half). A
    slot claimed when it ran out ends at that phase again, one interval on: every account's
    passes and audits keep their own second of the interval, not the one in which the
    instance started and claimed them all together (200 accounts' passes in the same second
    every minute, issue #37), and two of them are never less than half an interval apart."""
    interval = max(1, interval_s) * 1000
    phase = zlib.crc32(key.encode()) % interval
    left = interval - (int(now * 1000) - phase) % interval
    return left if left * 2 >= interval else left + interval


async def claim_slot(redis: Redis, key: str, interval_s: int) -> SlotClaim:
    """The instance that sets `key` first runs this interval's job; the others skip it, and
    all learn when the slot ends. An interval lowered since the slot was taken (60 s → 10 s on
    the page) is in force from the next check, not once the slot taken under the old one runs
    out (`CLAIM_SLOT`)."""
    claimed, left = await CLAIM_SLOT(redis, keys={"slot": key}, args={
        "ms": slot_ms(key, interval_s, time.time()), "interval": max(1, interval_s) * 1000})
    return SlotClaim(bool(claimed), int(left) / 1000)


async def slot_free(redis: Redis, key: str) -> bool:
    """Whether the slot `claim_slot` would take is free now (no write)."""
    return not await redis.exists(key)
