"""A deleted account's keys are gone within 60 s, whatever was running (issue #35, SPEC G.3;
reference §1.12).

`DELETE /api/accounts/{id}` deletes the account's keys at once, but a pass, the worker or a
button press of that account still running on some instance may write one afterwards (a
cursor, a mail claim, a stream entry, a lease). So the deletion leaves a tombstone
(`keys.ACCOUNTS_DELETED`: the id and the time) and `run_account_sweep`, on one instance at a
time (`keys.ACCOUNT_SWEEP_LOCK`), deletes every key of the id again every interval until the
window has passed, then drops the tombstone. An id whose configuration exists again (a deletion
cut short before its configuration went) is left alone: the tombstone only ends.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from messageweave.aio import every
from messageweave.store import keys
from messageweave.store.keys import AccountKeys
from messageweave.store.locks import Lock
from messageweave.store.redis import Redis
from messageweave.store.scripts import Script

log = logging.getLogger(__name__)

_BATCH = 500

# KEYS: tombstones   ARGV: id, score
# → 1 when the id's tombstone was the one swept (and is gone), 0 when it is another deletion's
# (the id was created and deleted again meanwhile: that tombstone stands).
DROP_TOMBSTONE = Script("""
if tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1])) == tonumber(ARGV[2]) then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0
""", keys=("tombstones",), args=("id", "score"))


def _owned(key: str, names: AccountKeys) -> bool:
    """Whether the key is the account's: its hash tag (the first `{…}`) opens `a:{<id>}:`,
    either at its start or where a name derived from the account's stream embeds it
    (`delivery:inflight:a:{<id>}:stalwart:jmap:…`). Another key that merely contains the text
    later on (a mail id of another account's claim) has another tag, and is not touched."""
    start = key.find("{")
    return start >= 2 and key.startswith(names.prefix, start - 2) and key != names.deleted


async def bump_accounts_version(redis: Redis) -> None:
    """Tell every instance's registry to read the accounts again (`AccountRegistry.refresh`):
    after a write of the index, an account's revision or its `enabled` flag (issue #37)."""
    await redis.incr(keys.ACCOUNTS_VERSION)


async def delete_account_keys(redis: Redis, account_id: str) -> int:
    """Delete every key of the account but its tombstone marker, and the members of
    `delivery:unknown_after_send` that name its stream; the number of keys deleted."""
    names = AccountKeys(account_id)
    deleted = 0
    batch: list[str] = []
    async for key in redis.scan_iter(match=f"*{names.every_key}", count=_BATCH):
        if _owned(str(key), names):
            batch.append(str(key))
        if len(batch) >= _BATCH:
            deleted += int(await redis.unlink(*batch))
            batch = []
    if batch:
        deleted += int(await redis.unlink(*batch))
    members = [m async for m, _score in redis.zscan_iter(keys.DELIVERY_UNKNOWN,
                                                         match=f"{names.prefix}*")]
    if members:
        await redis.zrem(keys.DELIVERY_UNKNOWN, *members)
    return deleted


async def sweep_once(redis: Redis, *, now_ms: int,
                     window_s: float = keys.ACCOUNT_DELETE_WINDOW_S,
                     interval_s: float = keys.ACCOUNT_SWEEP_INTERVAL_S) -> list[str]:
    """One pass over the tombstones: each deleted account's keys deleted again; once
    `window_s - interval_s` have passed since its deletion, this was its last sweep (the next
    would come after the window) and its tombstone, marker and index entry go. The ids whose
    tombstone ended."""
    rows: list[Any] = await redis.zrange(keys.ACCOUNTS_DELETED, 0, -1, withscores=True)
    ended = []
    for member, score in rows:
        account_id, deleted_at = str(member), int(score)
        names = AccountKeys(account_id)
        alive = bool(await redis.exists(names.config))  # a deletion cut short: leave it be
        if not alive:
            await delete_account_keys(redis, account_id)
        if now_ms < deleted_at + (window_s - interval_s) * 1000:
            continue
        if int(await DROP_TOMBSTONE(redis, keys={"tombstones": keys.ACCOUNTS_DELETED},
                                    args={"id": account_id, "score": str(deleted_at)})):
            if not alive:
                await redis.srem(keys.ACCOUNTS_INDEX, account_id)
                await bump_accounts_version(redis)
                await redis.delete(names.deleted)  # a create of the id is welcome again
            ended.append(account_id)
    return ended


async def run_account_sweep(redis: Redis, *, window_s: float = keys.ACCOUNT_DELETE_WINDOW_S,
                            interval_s: float = keys.ACCOUNT_SWEEP_INTERVAL_S) -> None:
    """Every `interval_s`, on the one instance that holds `ACCOUNT_SWEEP_LOCK` for the pass,
    `sweep_once`. The lock only saves work: two instances sweeping at once delete the same keys
    twice, nothing worse. A failed pass is logged and the next interval tries again
    (`aio.every`, which also ends the loop on a stop that a Redis call swallowed)."""
    lock = Lock(redis, keys.ACCOUNT_SWEEP_LOCK, keys.ACCOUNT_SWEEP_LOCK_TTL_S)

    async def sweep() -> None:
        if await redis.exists(keys.ACCOUNTS_DELETED) and await lock.acquire():
            try:
                for account_id in await sweep_once(redis, now_ms=int(time.time() * 1000),
                                                   window_s=window_s, interval_s=interval_s):
                    log.info("account %s: its keys are gone", account_id)
            finally:
                await lock.release()

    await every(interval_s, sweep, log, "account sweep")
