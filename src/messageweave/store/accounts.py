"""Typed operations on the accounts' configuration keys (issue #35, reference §1.12).

An account other than `default` is its encrypted account wire (`a:{<id>}:config`), the revision
beside it, its `enabled` flag and its owner key's HMAC, all under the account's hash tag, and its
id in the deployment-wide index `accounts`. Each write that must be atomic is one script on one
slot (the account's). `default` is `config:business` (`store.config_store`); only its name,
`enabled` flag and owner key live here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from messageweave.store import keys
from messageweave.store.account_sweep import bump_accounts_version, delete_account_keys
from messageweave.store.keys import AccountKeys
from messageweave.store.redis import Redis
from messageweave.store.scripts import Script

# KEYS: config, revision, enabled, deleted   ARGV: ciphertext
# → the new revision (1), -1 when the account exists already, -2 while a deleted account of the
# id is being swept (`store.account_sweep`); nothing written but the revision.
CREATE_ACCOUNT = Script("""
if redis.call('EXISTS', KEYS[4]) == 1 then
  return -2
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
  redis.call('SET', KEYS[3], '1')
  return redis.call('INCR', KEYS[2])
end
return -1
""", keys=("config", "revision", "enabled", "deleted"), args=("ciphertext",))

# KEYS: config, deleted   ARGV: at (ms), ttl (s)
# → 1. The configuration goes and the marker that refuses a create of the id comes, at once.
DELETE_ACCOUNT = Script("""
redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[2])
redis.call('DEL', KEYS[1])
return 1
""", keys=("config", "deleted"), args=("at", "ttl"))

# KEYS: config, revision   ARGV: expected ("" = any), ciphertext
# → the new revision; -1 when the stored revision is not the expected one, -2 when the account
# is gone (a write racing its deletion must not bring it back).
WRITE_ACCOUNT = Script("""
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -2
end
local current = tonumber(redis.call('GET', KEYS[2]) or '0')
if ARGV[1] ~= '' and tonumber(ARGV[1]) ~= current then
  return -1
end
redis.call('SET', KEYS[1], ARGV[2])
return redis.call('INCR', KEYS[2])
""", keys=("config", "revision"), args=("expected", "ciphertext"))

# KEYS: config, target   ARGV: value
# → 1 once `target` holds `value`; 0 when the account is gone (nothing written).
SET_IF_ACCOUNT = Script("""
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('SET', KEYS[2], ARGV[1])
return 1
""", keys=("config", "target"), args=("value",))

_DELETE_BATCH = 500


def _text(value: bytes | str | None) -> str | None:
    """A reply of this client (`decode_responses`) as the `str` it is."""
    return value.decode() if isinstance(value, bytes) else value


class AccountGone(Exception):
    """The account was deleted (or never created) while it was being written."""


class AccountExists(Exception):
    """An account with this id is stored already."""


class AccountBeingDeleted(Exception):
    """A deleted account of this id is still being swept (`store.account_sweep`): a create
    waits `retry_after_s` (reference §1.12)."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(retry_after_s)
        self.retry_after_s = retry_after_s


class AccountRevisionConflict(Exception):
    """The stored revision of the account is not the one the write was based on."""


@dataclass(frozen=True)
class StoredAccount:
    revision: int
    ciphertext: str | None
    enabled: bool  # absent = enabled


class AccountStore:
    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def ids(self) -> list[str]:
        """The ids in the index (accounts other than `default`), sorted."""
        return sorted(str(_text(i)) for i in await self.redis.smembers(keys.ACCOUNTS_INDEX))

    async def read(self, account_id: str) -> StoredAccount:
        k = AccountKeys(account_id)
        revision, ciphertext, enabled = await self.redis.mget(k.revision, k.config, k.enabled)
        return StoredAccount(int(revision) if revision else 0, _text(ciphertext),
                             _text(enabled) != "0")

    async def create(self, account_id: str, ciphertext: str) -> int:
        """Index the id first: a crash before the config is written leaves an id without an
        account, which reads as absent (and a retry creates it); never an unindexed account."""
        await self.redis.sadd(keys.ACCOUNTS_INDEX, account_id)
        k = AccountKeys(account_id)
        result = int(await CREATE_ACCOUNT(
            self.redis, keys={"config": k.config, "revision": k.revision, "enabled": k.enabled,
                              "deleted": k.deleted},
            args={"ciphertext": ciphertext}))
        if result == -2:
            await self.redis.srem(keys.ACCOUNTS_INDEX, account_id)  # no account was made
            raise AccountBeingDeleted(max(1, int(await self.redis.ttl(k.deleted))))
        if result < 0:
            raise AccountExists
        await bump_accounts_version(self.redis)
        return result

    async def write(self, account_id: str, ciphertext: str, expected: int | None) -> int:
        k = AccountKeys(account_id)
        result = int(await WRITE_ACCOUNT(
            self.redis, keys={"config": k.config, "revision": k.revision},
            args={"expected": "" if expected is None else str(expected),
                  "ciphertext": ciphertext}))
        if result == -2:
            raise AccountGone
        if result < 0:
            raise AccountRevisionConflict
        await bump_accounts_version(self.redis)
        return result

    async def set_enabled(self, account_id: str, enabled: bool) -> None:
        k = AccountKeys(account_id)
        if account_id == keys.DEFAULT_ACCOUNT:  # `default` exists with config:business
            await self.redis.set(k.enabled, "1" if enabled else "0")
        else:
            await self._set_if_account(k, k.enabled, "1" if enabled else "0")
        await bump_accounts_version(self.redis)

    async def default_name(self) -> str | None:
        return _text(await self.redis.get(AccountKeys(keys.DEFAULT_ACCOUNT).name))

    async def set_default_name(self, name: str) -> None:
        await self.redis.set(AccountKeys(keys.DEFAULT_ACCOUNT).name, name)

    # --- owner key and sessions ----------------------------------------------------------
    async def set_owner_key(self, account_id: str, digest: str) -> None:
        """Store the new owner key's HMAC, and end the sessions the old one opened (each
        session also names the key it was opened with, so none outlives it even before its
        key is deleted here)."""
        k = AccountKeys(account_id)
        if account_id == keys.DEFAULT_ACCOUNT:
            await self.redis.set(k.owner_key, digest)
        else:
            await self._set_if_account(k, k.owner_key, digest)
        await self._delete_matching(k.owner_session("*"))

    async def owner_key(self, account_id: str) -> str | None:
        return _text(await self.redis.get(AccountKeys(account_id).owner_key))

    async def put_owner_session(self, account_id: str, digest: str, key_digest: str) -> None:
        await self.redis.set(AccountKeys(account_id).owner_session(digest), key_digest,
                             ex=keys.OWNER_SESSION_TTL_S)

    async def end_owner_sessions(self, account_id: str, digest: str | None = None) -> None:
        """The session whose HMAC is `digest`, or (None) every session of the account."""
        k = AccountKeys(account_id)
        if digest is None:
            await self._delete_matching(k.owner_session("*"))
        else:
            await self.redis.delete(k.owner_session(digest))

    async def owner_session_key(self, account_id: str, digest: str) -> tuple[str | None,
                                                                             str | None]:
        """(the owner key's HMAC the session was opened with, the current one)."""
        k = AccountKeys(account_id)
        opened_with, current = await self.redis.mget(k.owner_session(digest), k.owner_key)
        return _text(opened_with), _text(current)

    # --- deletion ------------------------------------------------------------------------
    async def delete(self, account_id: str) -> None:
        """The tombstone first (an instance killed in the middle leaves the rest to the sweep),
        then the configuration with the marker that refuses a create of the id (so a write
        racing the deletion finds it gone), every key of the account, then its id in the
        index. What a late writer adds afterwards, the sweep deletes (`store.account_sweep`)."""
        k = AccountKeys(account_id)
        now_ms = int(time.time() * 1000)
        await self.redis.zadd(keys.ACCOUNTS_DELETED, {account_id: now_ms})
        await DELETE_ACCOUNT(self.redis, keys={"config": k.config, "deleted": k.deleted},
                             args={"at": str(now_ms), "ttl": str(keys.ACCOUNT_DELETE_WINDOW_S)})
        await delete_account_keys(self.redis, account_id)
        await self.redis.srem(keys.ACCOUNTS_INDEX, account_id)
        await bump_accounts_version(self.redis)

    async def _set_if_account(self, k: AccountKeys, target: str, value: str) -> None:
        done = await SET_IF_ACCOUNT(self.redis, keys={"config": k.config, "target": target},
                                    args={"value": value})
        if not int(done):
            raise AccountGone

    async def _delete_matching(self, pattern: str) -> None:
        batch: list[str] = []
        async for key in self.redis.scan_iter(match=pattern, count=_DELETE_BATCH):
            batch.append(key)
            if len(batch) >= _DELETE_BATCH:
                await self.redis.unlink(*batch)
                batch = []
        if batch:
            await self.redis.unlink(*batch)
