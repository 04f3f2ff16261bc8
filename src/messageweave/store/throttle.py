"""Failed-credential throttling per client address, counted in Redis so every instance agrees.

`THROTTLE_MAX_FAILURES` failed credentials from one client within `THROTTLE_WINDOW_S` lock it
out for `THROTTLE_LOCK_BASE_S`; every further lock within `THROTTLE_STRIKES_TTL_S` of the
previous one doubles, up to `THROTTLE_LOCK_MAX_S`. Keys and numbers: `messageweave.store.keys`.

Bounded by count as well as by age (issue #23): every failure also scores its client in
`THROTTLE_CLIENTS` (Redis's clock, ms), and beyond `THROTTLE_CLIENTS_MAX` clients the least
recently failing ones are dropped with their keys — never the client failing now, so the lock
it just earned holds. An attacker with more addresses than that can push the oldest clients'
counts and locks out, but each of those addresses already has its own 10 tries a window.
"""

from __future__ import annotations

from typing import Any

from messageweave.store import keys
from messageweave.store.redis import Redis
from messageweave.store.scripts import Script

# Bounds the client index (`RECORD_FAILURE`'s KEYS[4], ARGV[5] to ARGV[10]).
_BOUND_CLIENTS = """
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local ttl = tonumber(ARGV[5])
redis.call('ZADD', KEYS[4], now_ms, ARGV[6])
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. (now_ms - ttl * 1000))
local excess = redis.call('ZCARD', KEYS[4]) - tonumber(ARGV[7])
if excess > 0 then
  for _, old in ipairs(redis.call('ZRANGE', KEYS[4], 0, excess)) do
    if excess > 0 and old ~= ARGV[6] then
      redis.call('DEL', ARGV[8] .. old, ARGV[9] .. old, ARGV[10] .. old)
      redis.call('ZREM', KEYS[4], old)
      excess = excess - 1
    end
  end
end
redis.call('EXPIRE', KEYS[4], ttl)
"""
# KEYS: failures, lock, strikes, clients (the client index)
# ARGV: max_failures, window, lock_base, lock_max, strikes_ttl, client, max_clients,
#       failures_prefix, lock_prefix, strikes_prefix (the dropped clients' keys are named from
#       them)
# → the new lock's length in seconds, or 0 while the client is still under the limit. Counts
# one failure and bounds the index (`_BOUND_CLIENTS`); the one that reaches the limit clears the
# count and sets the lock.
RECORD_FAILURE = Script(_BOUND_CLIENTS + """
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
""", keys=("failures", "lock", "strikes", "clients"), args=(
    "max_failures", "window", "lock_base", "lock_max", "strikes_ttl", "client", "max_clients",
    "failures_prefix", "lock_prefix", "strikes_prefix"))




async def locked_for(redis: Redis, client: str) -> int:
    """Seconds left of `client`'s lock (rounded up), 0 when it is not locked."""
    remaining_ms = int(await redis.pttl(keys.throttle_lock(client)))
    return 0 if remaining_ms <= 0 else -(-remaining_ms // 1000)


async def record_failure(redis: Redis, client: str) -> int:
    """Count one failed credential; the length of the lock it started, else 0."""
    lock: Any = await RECORD_FAILURE(redis, keys={
        "failures": keys.throttle_failures(client), "lock": keys.throttle_lock(client),
        "strikes": keys.throttle_strikes(client), "clients": keys.THROTTLE_CLIENTS,
    }, args={
        "max_failures": keys.THROTTLE_MAX_FAILURES, "window": keys.THROTTLE_WINDOW_S,
        "lock_base": keys.THROTTLE_LOCK_BASE_S, "lock_max": keys.THROTTLE_LOCK_MAX_S,
        "strikes_ttl": keys.THROTTLE_STRIKES_TTL_S, "client": client,
        "max_clients": keys.THROTTLE_CLIENTS_MAX,
        # what the script prepends to a dropped client's name: the per-client key templates
        "failures_prefix": keys.throttle_failures(""), "lock_prefix": keys.throttle_lock(""),
        "strikes_prefix": keys.throttle_strikes(""),
    })
    return int(lock)
