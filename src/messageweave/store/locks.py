"""A lease in Redis (`Lock`: `SET key owner NX EX ttl`, renewed and released by its owner only)
and what its holder raises when it lost it (`LockLost`): the reconcile's lock
(`store.reconcile_state.reconcile_lock`) and the poller's (`store.receivers`)."""

from __future__ import annotations

import asyncio
import contextlib
import secrets

from messageweave.store.redis import Redis
from messageweave.store.scripts import Script
from messageweave.store.together import together

# KEYS: lock   ARGV: owner → 1 when released, 0 when someone else holds it.
RELEASE_LOCK = Script("""
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
""", keys=("lock",), args=("owner",))

# KEYS: lock   ARGV: owner, ttl (seconds) → 1 when renewed, 0 when the lease is lost.
RENEW_LOCK = Script("""
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('EXPIRE', KEYS[1], ARGV[2])
end
return 0
""", keys=("lock",), args=("owner", "ttl"))


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
        """Whether the lease is still ours (then its TTL starts again); sent `together` with
        every other renewal of this turn of the loop (the leases of many accounts)."""
        result = await together(self.redis, lambda pipe: RENEW_LOCK.queue(
            pipe, keys={"lock": self.key}, args={"owner": self.owner, "ttl": self.ttl_s}))
        return int(result) == 1

    async def release(self) -> None:
        await RELEASE_LOCK(self.redis, keys={"lock": self.key}, args={"owner": self.owner})


class LockLost(Exception):
    """A `Lock`'s lease expired or was taken over while its holder worked: whatever the holder
    writes under the lock from then on is refused (the reconcile's cursor, the poller's offset),
    and the holder stops."""


class LockLease:
    """A `Lock` held by a pass while it works: renewed every `renew_every_s` beside it (each
    renewal `together` with the others of its turn); `lost` once a renewal finds it gone or
    cannot tell (a Redis error). The pass checks `lost` before it writes; its writes' scripts
    check the owner anyway."""

    def __init__(self, lock: Lock, renew_every_s: float) -> None:
        self.lock = lock
        self.lost = False
        self._every = renew_every_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="pass-lease")

    async def _run(self) -> None:
        while not self.lost:
            await asyncio.sleep(self._every)
            try:
                self.lost = not await self.lock.renew()
            except Exception:  # a Redis error: we cannot prove we still own the lease
                self.lost = True

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
