"""The in-place upgrade of a Redis written before issue #35 (reference §1.0, §1.11): today's
single-account keys move to their hash-tagged names, the mailbox's to the `default` account.

Each step renames only a source that still exists (RENAME keeps a stream's consumer group, its
pending entries and a key's TTL), so a run killed at any step is resumed by the next one; the
version (`SCHEMA_VERSION`) is written last, and a Redis that has it is left alone. A Redis of an
earlier version runs every step again: each finds only its own old names (format 2 still had the
reply drafts deployment-wide, format 3 has them per account). One instance
runs it, under `UPGRADE_LOCK`; the others wait for the version. Runs on a single Redis (today's
release knew no other); RENAME across slots is refused by a cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from messageweave.store import keys, waiting
from messageweave.store.locks import Lock
from messageweave.store.redis import Redis, text_of

SCHEMA_VERSION = "schema:version"
CURRENT = "3"
UPGRADE_LOCK = "lock:upgrade"
# Short, and renewed every third of it while the upgrade runs, however long one step takes: a
# run killed with the lock held delays the next by at most this.
UPGRADE_LOCK_TTL_S = 6
_WAIT_S = 0.2
# Redis cannot be reached (refused, reset, timed out, still loading, the wrong password): the
# serving process tries again after 0.5 s, doubling up to 30 s, while `/healthz` answers.
UNREACHABLE = (RedisConnectionError, RedisTimeoutError)
_RETRY_FIRST_S, _RETRY_MAX_S = 0.5, 30.0
log = logging.getLogger(__name__)
# Test-only: SIGKILL this process right after the given step (a kill at a precise step cannot
# be produced otherwise; tests/integration/test_upgrade.py).
KILL_AFTER_ENV = "MESSAGEWEAVE_UPGRADE_KILL_AFTER"

Moved = list[tuple[str, str]]
_OLD_JMAP, _OLD_TG = "stalwart:jmap", "stalwart:telegram"
_STREAMS = ((_OLD_JMAP, keys.STREAM_JMAP), (_OLD_TG, keys.STREAM_TELEGRAM))


def _fixed() -> list[tuple[str, str]]:
    """Old name → new name of every key with a fixed name."""
    out = [("config:business", keys.BUSINESS_CONFIG),
           ("config:business:revision", keys.BUSINESS_CONFIG_REVISION),
           ("config:enabled", keys.ENABLED), ("telegram:refused", keys.REFUSED_CHATS),
           ("telegram:refused:info", keys.REFUSED_CHATS_INFO),
           ("lock:telegram-poll", keys.TELEGRAM_POLL_LOCK), ("reply:drafts", keys.REPLY_DRAFTS)]
    out += [(name, keys.DEFAULT.named(name)) for name in keys.ACCOUNT_NAMES]
    for old, new in _STREAMS:
        out += [(old, new), (f"{old}{keys.DLQ_SUFFIX}", keys.dlq(new)),
                (f"delivery:retry_due:{old}", keys.retry_due(new))]
    return out


def _patterns() -> list[tuple[str, str]]:
    """Old prefix → new prefix of the patterned keys (every key starting with the old)."""
    out = [("dedup:tg:", keys.TG + "dedup:tg:"), ("governor:", keys.GOV + "governor:"),
           ("throttle:", keys.THR + "throttle:"),
           ("telegram:poll:offset:", keys.TELEGRAM_POLL_OFFSET_PREFIX)]
    out += [(name, keys.DEFAULT.prefix + name) for name in (
        "dedup:jmap:", "audit:healed:", "consent:ai:", "button:", "reconcile:catchup:",
        "push:subscription:", "push:registration:", "push:orphan:", "lock:push-register:",
        "ratelimit:push-verify:", "reply:draft:", "reply:entry:")]
    for old, new in _STREAMS:
        out += [(f"delivery:{part}:{old}:", f"delivery:{part}:{new}:")
                for part in ("inflight", "committed", "intent", "digest")]
        out.append((f"retry:{old}:", f"retry:{new}:"))
    return out


async def _rename(redis: Redis, old: str, new: str) -> Moved:
    """Move `old` to `new` unless it moved already (or never existed); a `new` that exists
    already (written since) is kept, and `old` stays for the operator to look at."""
    if await redis.exists(old) and not await redis.exists(new):
        await redis.rename(old, new)
        return [(old, new)]
    return []


async def _rename_prefix(redis: Redis, old: str, new: str) -> Moved:
    moved: Moved = []
    async for name in redis.scan_iter(match=f"{old}*", count=1000):
        moved += await _rename(redis, str(name), new + str(name)[len(old):])
    return moved


def _new_member(member: str) -> str:
    for old, new in _STREAMS:
        if member.startswith(old + "/"):
            return new + member[len(old):]
    return member


async def _split_waiting(redis: Redis) -> Moved:
    """`delivery:waiting:{peer}` held both streams' entries: each goes to its stream's set,
    named as the ledger names it now (added first, the old set deleted last)."""
    moved: Moved = []
    for peer in waiting.PEERS:
        old = f"delivery:waiting:{peer}"
        rows: list[Any] = await redis.zrange(old, 0, -1, withscores=True)
        for member, score in rows:
            renamed = _new_member(str(member))
            stream = renamed.rsplit("/", 1)[0]
            target = keys.delivery_waiting(peer, stream if stream in keys.STREAMS
                                           else keys.STREAM_JMAP)
            await redis.zadd(target, {renamed: score})
            await redis.expire(target, keys.DELIVERY_WAITING_TTL_S)
            moved.append((f"{old} {member}", f"{target} {renamed}"))
        await redis.delete(old)
    return moved


async def _rename_unknown(redis: Redis) -> Moved:
    """The members of `delivery:unknown_after_send` name their stream: renamed in place."""
    moved: Moved = []
    rows: list[Any] = await redis.zrange(keys.DELIVERY_UNKNOWN, 0, -1, withscores=True)
    for member, score in rows:
        renamed = _new_member(str(member))
        if renamed != member:
            await redis.zadd(keys.DELIVERY_UNKNOWN, {renamed: score})
            await redis.zrem(keys.DELIVERY_UNKNOWN, member)
            unknown = keys.DELIVERY_UNKNOWN
            moved.append((f"{unknown} {member}", f"{unknown} {renamed}"))
    return moved


Step = Callable[[Redis], Awaitable[Moved]]


def steps() -> list[Step]:
    """The upgrade, in order: the fixed names, the patterned ones, the two sets whose members
    name a stream. Each is idempotent."""
    out: list[Step] = [partial(_rename, old=old, new=new) for old, new in _fixed()]
    out += [partial(_rename_prefix, old=old, new=new) for old, new in _patterns()]
    return [*out, _split_waiting, _rename_unknown]


async def upgraded(redis: Redis) -> bool:
    return text_of(await redis.get(SCHEMA_VERSION)) == CURRENT


async def upgrade(redis: Redis) -> Moved:
    """Bring Redis to the current names; what this call moved (old → new; a member of a set
    as `<set> <member>`), empty when nothing was left to move. Safe to call at every start: a
    current Redis costs one GET. Raises what Redis raises (`UNREACHABLE`)."""
    if await upgraded(redis):
        return []
    lock = Lock(redis, UPGRADE_LOCK, UPGRADE_LOCK_TTL_S)
    while not await lock.acquire():
        await asyncio.sleep(_WAIT_S)
        if await upgraded(redis):
            return []
    try:
        async with _renewed(lock):
            if await upgraded(redis):
                return []
            kill_after = int(os.environ.get(KILL_AFTER_ENV, "0") or 0)
            moved: Moved = []
            for number, step in enumerate(steps(), start=1):
                moved += await step(redis)
                if number == kill_after:
                    os.kill(os.getpid(), signal.SIGKILL)
            await redis.set(SCHEMA_VERSION, CURRENT)
            return moved
    finally:
        with contextlib.suppress(*UNREACHABLE):
            await lock.release()


@contextlib.asynccontextmanager
async def _renewed(lock: Lock) -> AsyncIterator[None]:
    """`lock` renewed every third of its TTL while the block runs."""
    async def renew() -> None:
        while True:
            await asyncio.sleep(lock.ttl_s / 3)
            with contextlib.suppress(*UNREACHABLE):
                await lock.renew()

    task = asyncio.create_task(renew(), name="upgrade-lock")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def upgrade_if_reachable(redis: Redis) -> None:
    """`upgrade` for a CLI command: when Redis cannot be reached nothing is moved, and the
    command meets (and reports) that itself, as before issue #35."""
    with contextlib.suppress(*UNREACHABLE):
        await upgrade(redis)


async def upgrade_when_reachable(redis: Redis) -> None:
    """`upgrade`, tried again with backoff while Redis cannot be reached (the serving process:
    its loops wait for this, its HTTP server does not)."""
    wait = _RETRY_FIRST_S
    while True:
        try:
            await upgrade(redis)
            return
        except UNREACHABLE as exc:
            log.warning("data upgrade: Redis unreachable (%s), next try in %.1f s",
                        type(exc).__name__, wait)
        await asyncio.sleep(wait)
        wait = min(wait * 2, _RETRY_MAX_S)
