"""Redis state of the two outward connections that need no public URL (issue #22): the
Telegram poller's lease, offset and status, and the JMAP EventSource holder's lease and status.

Each loop runs on one instance of the cluster at a time, the holder of a `Lock`; the offset is
written by a script that checks the lease first (`save_offset`), so a holder that lost its lease
(paused, partitioned) can never move it. The statuses are small hashes with an EX, written by
the holder and read by every instance (`/ready`, `diagnose`, the page).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from redis.exceptions import RedisError

from messageweave.aio import LocalWakes, cancel
from messageweave.store import keys
from messageweave.store.locks import Lock, LockLost
from messageweave.store.redis import Redis, text_of
from messageweave.store.scripts import Script
from messageweave.store.together import on_grid, together

# KEYS: lock (the lease), offset   ARGV: owner, offset
# → 1 stored (or already higher), 0 lease lost
SAVE_OFFSET = Script("""
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local stored = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[2]) > stored then redis.call('SET', KEYS[2], ARGV[2]) end
return 1
""", keys=("lock", "offset"), args=("owner", "offset"))


def poll_lock(redis: Redis) -> Lock:
    return Lock(redis, keys.TELEGRAM_POLL_LOCK, keys.TELEGRAM_POLL_LOCK_TTL_S)


# The admin routes and the poller of one instance share its Redis client (`LocalWakes`).
_WEBHOOK_WAKES = LocalWakes()


def watch_webhook_changes(redis: Redis, wake: asyncio.Event) -> None:
    """Have `webhook_changed` on this very client set `wake` (the poller's standby)."""
    _WEBHOOK_WAKES.watch(redis, wake)


def webhook_changed(redis: Redis) -> None:
    """This instance just deleted or registered the webhook: its poller, standing by between
    two `getWebhookInfo`, looks again now. A poller on another instance finds out at its next
    check (`pipeline.polling.WEBHOOK_CHECK_S`)."""
    _WEBHOOK_WAKES.wake(redis)


def bot_id(token: str) -> str:
    """The public part of a bot token (`123456:secret` → `123456`), naming its offset."""
    head = token.partition(":")[0].strip()
    return head if head.isdigit() else "unknown"


async def read_offset(redis: Redis, token: str) -> int | None:
    raw = text_of(await redis.get(keys.telegram_poll_offset(bot_id(token))))
    return int(raw) if raw and raw.isdigit() else None


async def save_offset(redis: Redis, lock: Lock, token: str, offset: int) -> bool:
    """Store the next offset while `lock` is held (never lowering it); False = lease lost.
    It reaches a replica before the next `getUpdates` confirms the updates to Telegram
    (§7.18): lost in a failover with the updates it follows, they would be gone for good."""
    result = await SAVE_OFFSET.replicated(
        redis, keys={"lock": lock.key, "offset": keys.telegram_poll_offset(bot_id(token))},
        args={"owner": lock.owner, "offset": str(offset)})
    return int(result) == 1


@dataclass(frozen=True)
class LoopStatus:
    """What a holder last reported: `state` (a code of the loop's own), `detail` (plain words,
    no secret), `at` (when it was written), `since` (when this state began) and, for the
    EventSource, `last_event` (Unix seconds of the last event); `revision`, the configuration
    revision the holder acted on."""

    state: str
    detail: str = ""
    at: int = 0
    since: int = 0
    last_event: int | None = None
    revision: int = 0


async def write_status(redis: Redis, key: str, ttl_s: int, status: LoopStatus) -> None:
    at = status.at or int(time.time())
    last = "" if status.last_event is None else str(status.last_event)
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hset(key, mapping={"state": status.state, "detail": status.detail, "at": str(at),
                                "since": str(status.since), "last_event": last,
                                "revision": str(status.revision)})
        pipe.expire(key, ttl_s)
        await pipe.execute()


async def read_status(redis: Redis, key: str) -> LoopStatus | None:
    """The status at `key`, read `together` with the other accounts' (their schedulers' slot
    checks read the push in force on one grid)."""
    raw = await together(redis, lambda pipe: pipe.hgetall(key))
    if not raw:
        return None
    fields = {text_of(k) or "": text_of(v) or "" for k, v in raw.items()}
    last = fields.get("last_event", "")
    return LoopStatus(
        fields.get("state", ""), fields.get("detail", ""), _int(fields.get("at")),
        _int(fields.get("since")), int(last) if last.isdigit() else None,
        _int(fields.get("revision")),
    )


def _int(raw: str | None) -> int:
    return int(raw) if raw and raw.isdigit() else 0


async def hold(lock: Lock, body: Callable[[], Awaitable[None]], renew_s: float) -> bool:
    """Run `body` while holding `lock`: False at once when another instance holds it. The lease
    is renewed every `renew_s` beside the body; a renewal that finds it gone cancels the body
    and raises `LockLost`. Released on the way out, whatever happened. The renewals are on
    the grid of `renew_s` (`store.together.on_grid`: the next is half to one and a half
    `renew_s` away), so the leases of every account of the instance go out in one round
    trip."""
    if not await lock.acquire():
        return False
    body_task = asyncio.ensure_future(body())
    try:
        while True:
            done, _ = await asyncio.wait({body_task}, timeout=on_grid(renew_s))
            if done:
                body_task.result()
                return True
            if not await lock.renew():
                raise LockLost(lock.key)
    finally:
        if not body_task.done():
            with contextlib.suppress(Exception):
                await cancel(body_task)
        with contextlib.suppress(RedisError):
            await lock.release()
