"""Failed-credential throttling per client address, counted in Redis so every instance agrees.

`THROTTLE_MAX_FAILURES` failed credentials from one client within `THROTTLE_WINDOW_S` lock it
out for `THROTTLE_LOCK_BASE_S`; every further lock within `THROTTLE_STRIKES_TTL_S` of the
previous one doubles, up to `THROTTLE_LOCK_MAX_S`. Keys and numbers: `messageweave.store.keys`.
"""

from __future__ import annotations

from typing import Any

from messageweave.store import keys
from messageweave.store.redis import Redis

# KEYS: failures, lock, strikes. ARGV: max failures, window, base lock, max lock, strikes TTL.
# Counts one failure; the one that reaches the limit clears the count and sets the lock.
# Returns the new lock's length in seconds, or 0 while the client is still under the limit.
RECORD_FAILURE = """
local failures = redis.call('INCR', KEYS[1])
if redis.call('TTL', KEYS[1]) < 0 then
  redis.call('EXPIRE', KEYS[1], ARGV[2])
end
if failures < tonumber(ARGV[1]) then
  return 0
end
redis.call('DEL', KEYS[1])
local strikes = redis.call('INCR', KEYS[3])
redis.call('EXPIRE', KEYS[3], ARGV[5])
local lock = tonumber(ARGV[3])
local cap = tonumber(ARGV[4])
for _ = 2, strikes do
  if lock >= cap then break end
  lock = lock * 2
end
if lock > cap then lock = cap end
redis.call('SET', KEYS[2], lock, 'EX', lock)
return lock
"""


async def locked_for(redis: Redis, client: str) -> int:
    """Seconds left of `client`'s lock (rounded up), 0 when it is not locked."""
    remaining_ms = int(await redis.pttl(keys.throttle_lock(client)))
    return 0 if remaining_ms <= 0 else -(-remaining_ms // 1000)


async def record_failure(redis: Redis, client: str) -> int:
    """Count one failed credential; the length of the lock it started, else 0."""
    lock: Any = await redis.eval(
        RECORD_FAILURE, 3,
        keys.throttle_failures(client), keys.throttle_lock(client), keys.throttle_strikes(client),
        keys.THROTTLE_MAX_FAILURES, keys.THROTTLE_WINDOW_S, keys.THROTTLE_LOCK_BASE_S,
        keys.THROTTLE_LOCK_MAX_S, keys.THROTTLE_STRIKES_TTL_S,
    )
    return int(lock)
