"""Lua scripts: each multi-key change that must be atomic is one script."""

from __future__ import annotations

# KEYS: config:business, config:business:revision
# ARGV: expected revision ("" = any), ciphertext
# → new revision, or -1 when the stored revision is not the expected one (nothing written).
WRITE_BUSINESS_CONFIG = """
local current = tonumber(redis.call('GET', KEYS[2]) or '0')
if ARGV[1] ~= '' and tonumber(ARGV[1]) ~= current then
  return -1
end
redis.call('SET', KEYS[1], ARGV[2])
local revision = redis.call('INCR', KEYS[2])
return revision
"""

# KEYS: config:business, config:business:revision   ARGV: ciphertext
# → new revision, or -1 when a configuration already exists (create-only).
CREATE_BUSINESS_CONFIG = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
  return redis.call('INCR', KEYS[2])
end
return -1
"""

# KEYS: lock key   ARGV: owner  → 1 when released, 0 when someone else holds it.
RELEASE_LOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

# KEYS: lock key   ARGV: owner, ttl seconds  → 1 when renewed, 0 when the lease is lost.
RENEW_LOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('EXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
