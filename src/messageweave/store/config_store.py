"""Typed operations on the configuration keys. Handlers call these, never Redis directly."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from dataclasses import dataclass

from messageweave.jsonio import dump_json
from messageweave.store import keys
from messageweave.store.redis import Redis
from messageweave.store.scripts import Script

# KEYS: config (config:business), revision (config:business:revision)
# ARGV: expected ("" = any), ciphertext
# → new revision, or -1 when the stored revision is not the expected one (nothing written).
WRITE_BUSINESS_CONFIG = Script("""
local current = tonumber(redis.call('GET', KEYS[2]) or '0')
if ARGV[1] ~= '' and tonumber(ARGV[1]) ~= current then
  return -1
end
redis.call('SET', KEYS[1], ARGV[2])
local revision = redis.call('INCR', KEYS[2])
return revision
""", keys=("config", "revision"), args=("expected", "ciphertext"))

# KEYS: config (config:business), revision (config:business:revision)   ARGV: ciphertext
# → new revision, or -1 when a configuration already exists (create-only).
CREATE_BUSINESS_CONFIG = Script("""
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
  return redis.call('INCR', KEYS[2])
end
return -1
""", keys=("config", "revision"), args=("ciphertext",))
SWITCH_READ_S = 0.25  # `ConfigStore.switched_on`: the reload loop's `RELOAD_INTERVAL_S`
_CONFIG_KEYS = {"config": keys.BUSINESS_CONFIG, "revision": keys.BUSINESS_CONFIG_REVISION}


class RevisionConflict(Exception):
    """The stored revision is not the one the write was based on."""


class AlreadyConfigured(Exception):
    """Bootstrap found a configuration already stored."""


class CorruptValue(Exception):
    """A stored value cannot be read back (not JSON, wrong shape)."""


@dataclass(frozen=True)
class StoredBusinessConfig:
    revision: int
    ciphertext: str | None


def sha256_hex(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def session_digest(key: bytes, token: str) -> str:
    """What `config:admin_session` holds for a session: HMAC-SHA256(admin key, token) in hex
    (issue #23). Without the key no stored value can be made to match a token, and a new key
    matches no session made with the old one."""
    return hmac.new(key, token.encode(), hashlib.sha256).hexdigest()


class ConfigStore:
    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._switch: asyncio.Future[bool] | None = None  # `switched_on`'s read, in force
        self._switch_until = 0.0  # until then

    # --- business configuration ----------------------------------------------------------
    async def business_revision(self) -> int:
        raw = await self.redis.get(keys.BUSINESS_CONFIG_REVISION)
        return int(raw) if raw else 0

    async def business_config(self) -> StoredBusinessConfig:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.get(keys.BUSINESS_CONFIG_REVISION)
            pipe.get(keys.BUSINESS_CONFIG)
            revision, ciphertext = await pipe.execute()
        return StoredBusinessConfig(int(revision) if revision else 0, ciphertext)

    async def write_business_config(self, ciphertext: str, expected_revision: int | None) -> int:
        expected = "" if expected_revision is None else str(expected_revision)
        result = int(await WRITE_BUSINESS_CONFIG(
            self.redis, keys=_CONFIG_KEYS, args={"expected": expected, "ciphertext": ciphertext}))
        if result < 0:
            raise RevisionConflict
        return result

    async def create_business_config(self, ciphertext: str) -> int:
        result = int(await CREATE_BUSINESS_CONFIG(
            self.redis, keys=_CONFIG_KEYS, args={"ciphertext": ciphertext}))
        if result < 0:
            raise AlreadyConfigured
        return result

    # --- switches and runtime parameters -------------------------------------------------
    async def enabled(self) -> bool:
        return await self.redis.get(keys.ENABLED) == "1"

    async def switched_on(self) -> bool:
        """`enabled` for the mail loops of every account of the instance, which share this
        store: one read at most per `SWITCH_READ_S` for all of them, awaited by every loop
        that asks meanwhile (each read it on every tick: 200 accounts' loops ~170 GETs a
        second, issue #37). A switch written here is seen at once; one written by another
        instance within `SWITCH_READ_S`."""
        now = time.monotonic()
        if self._switch is None or (self._switch.done() and now >= self._switch_until):
            self._switch = asyncio.ensure_future(self.enabled())
            self._switch_until = now + SWITCH_READ_S
        return await asyncio.shield(self._switch)

    async def set_enabled(self, enabled: bool) -> None:
        await self.redis.set(keys.ENABLED, "1" if enabled else "0")
        self._switch = None

    async def outbound(self) -> dict[str, object] | None:
        raw = await self.redis.get(keys.OUTBOUND_CONFIG)
        if raw is None:
            return None
        try:
            value = json.loads(raw)
        except ValueError as exc:
            raise CorruptValue(keys.OUTBOUND_CONFIG) from exc
        if not isinstance(value, dict):
            raise CorruptValue(keys.OUTBOUND_CONFIG)
        return value

    async def set_outbound(self, value: dict[str, int]) -> None:
        await self.redis.set(keys.OUTBOUND_CONFIG, dump_json(value))

    # --- admin session -------------------------------------------------------------------
    # `key` is the admin key (`Settings.encryption_key`): a session is bound to it.
    async def put_admin_session(self, token: str, key: bytes) -> None:
        await self.redis.set(keys.ADMIN_SESSION, session_digest(key, token),
                             ex=keys.ADMIN_SESSION_TTL_S)

    async def admin_session_valid(self, token: str, key: bytes) -> bool:
        if not token or not key:
            return False
        stored = await self.redis.get(keys.ADMIN_SESSION)
        if not isinstance(stored, str):
            return False
        return hmac.compare_digest(stored.encode(), session_digest(key, token).encode())

    async def revoke_admin_session(self) -> None:
        await self.redis.delete(keys.ADMIN_SESSION)

    async def ping(self) -> bool:
        return bool(await self.redis.ping())
