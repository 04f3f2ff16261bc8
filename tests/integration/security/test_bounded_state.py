"""Issue #23 (6): every Redis structure that requests from anyone can grow is bounded by count as
well as by age (reference §1: the audit log, the send log, the refused chats, the throttle
records). Real Redis; the logs are filled to their bound directly, then one record is written
the way the service writes it."""

from __future__ import annotations

import asyncio
import json

import redis.asyncio as aioredis

from messageweave.ops.sendlog import record_send
from messageweave.store import keys, throttle
from tests.helpers import (
    WRONG_BEARER,
    closed_port,
    login,
    running_client,
    sample_wire,
    save_wire,
    settings_for,
)

ROTATED = ("192.0.2.77", 40000)  # one more address of an attacker who rotates them


async def _fill(redis: aioredis.Redis, key: str, count: int) -> None:
    """`count` fresh entries (well inside the retention) in the stream `key`."""
    record = json.dumps({"action": "filler"})
    for start in range(0, count, 5000):
        async with redis.pipeline(transaction=False) as pipe:
            for _ in range(start, min(start + 5000, count)):
                pipe.xadd(key, {"r": record})
            await pipe.execute()


async def test_the_audit_log_keeps_its_count_when_rotating_addresses_lock_themselves_out(
    embedded_redis_url: str, redis_client: aioredis.Redis
) -> None:
    """Finding 6 (issue #23): the audit log was trimmed by age only (90 days), and every
    throttle lock writes `auth_throttled`, so an attacker rotating addresses grew it without
    bound. The lock of one more address, on a full log, must leave it at its count."""
    await _fill(redis_client, keys.AUDIT_LOG, keys.AUDIT_LOG_MAX_ENTRIES)
    async with running_client(settings_for(embedded_redis_url), client=ROTATED) as attacker:
        # a session_created and a config_saved record
        await save_wire(attacker, await login(attacker), sample_wire(
            telegram_api_base_url=f"http://127.0.0.1:{closed_port()}"))
        for _ in range(keys.THROTTLE_MAX_FAILURES):
            await attacker.post("/api/admin/session", headers=WRONG_BEARER)
        assert (await attacker.post("/api/admin/session", headers=WRONG_BEARER)).status_code == 429
    assert await redis_client.xlen(keys.AUDIT_LOG) == keys.AUDIT_LOG_MAX_ENTRIES
    (_, newest), = await redis_client.xrevrange(keys.AUDIT_LOG, count=1)
    assert json.loads(newest["r"])["action"] == "auth_throttled"


async def test_the_send_log_keeps_its_count(redis_client: aioredis.Redis) -> None:
    """Finding 6 (issue #23): the send log was trimmed by age only (7 days): a burst of
    delivery attempts (a flood of mail, a retry storm) grew it without bound within a week."""
    await _fill(redis_client, keys.SEND_LOG, keys.SEND_LOG_MAX_ENTRIES)
    await record_send(redis_client, stream=keys.STREAM_JMAP, event_id="1-0", kind="new_mail",
                      chat_id=4242, outcome="delivered", message_ids=[7])
    assert await redis_client.xlen(keys.SEND_LOG) == keys.SEND_LOG_MAX_ENTRIES
    (_, newest), = await redis_client.xrevrange(keys.SEND_LOG, count=1)
    assert json.loads(newest["r"])["message_ids"] == [7]


def _address(n: int) -> str:
    return f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}"


async def _throttle_keys(redis: aioredis.Redis) -> list[str]:
    return [key async for key in redis.scan_iter(match="{thr}:throttle:*", count=5000)]


async def test_throttle_records_keep_their_count_when_addresses_rotate(
    redis_client: aioredis.Redis,
) -> None:
    """Finding 6 (issue #23): each throttle key had an EX but nothing bounded how many clients
    there are: one failed credential from each of a million addresses left a million keys for
    a minute (and every locked one two keys for a day). At most `THROTTLE_CLIENTS_MAX`
    clients are kept, the least recently failing dropped first, keys and all."""
    total = keys.THROTTLE_CLIENTS_MAX + 50
    locked = _address(total + 1)
    for _ in range(keys.THROTTLE_MAX_FAILURES):  # the oldest client: locked, then quiet
        await throttle.record_failure(redis_client, locked)
    assert await throttle.locked_for(redis_client, locked) == keys.THROTTLE_LOCK_BASE_S
    for start in range(0, total, 50):  # concurrently, within the client's connection pool
        await asyncio.gather(*(throttle.record_failure(redis_client, _address(n))
                               for n in range(start, min(start + 50, total))))
    assert await redis_client.zcard(keys.THROTTLE_CLIENTS) == keys.THROTTLE_CLIENTS_MAX
    found = await _throttle_keys(redis_client)
    assert len(found) == keys.THROTTLE_CLIENTS_MAX + 1  # a count per client, and the index
    assert keys.throttle_failures(_address(total - 1)) in found  # the newest are kept
    assert keys.throttle_lock(locked) not in found  # the least recent went, its lock too
    assert keys.throttle_failures(_address(0)) not in found


async def test_the_client_index_forgets_clients_whose_keys_have_expired(
    redis_client: aioredis.Redis,
) -> None:
    """Finding 6 (issue #23): the index that bounds the clients is bounded by age too: a
    client not seen for a day (when its last key, the strikes, expires) leaves it."""
    day_old = "198.51.100.1"
    await redis_client.zadd(keys.THROTTLE_CLIENTS, {day_old: 1})  # score: Unix ms, long ago
    await throttle.record_failure(redis_client, "198.51.100.2")
    assert await redis_client.zrange(keys.THROTTLE_CLIENTS, 0, -1) == ["198.51.100.2"]
    assert 0 < await redis_client.ttl(keys.THROTTLE_CLIENTS) <= keys.THROTTLE_STRIKES_TTL_S


async def test_a_throttle_lock_still_works_beside_the_bound(
    embedded_redis_url: str, redis_client: aioredis.Redis
) -> None:
    """Finding 6 (issue #23): the bound must not cost the lock its meaning: the client that
    failed last is never the one dropped, so the lock it just earned holds, even when every
    other client in a full index looks newer (another instance's clock, or Redis's, ahead)."""
    await redis_client.zadd(keys.THROTTLE_CLIENTS, {
        _address(n): 10**13 for n in range(keys.THROTTLE_CLIENTS_MAX)})  # full, all "newer"
    async with running_client(settings_for(embedded_redis_url), client=ROTATED) as attacker:
        for _ in range(keys.THROTTLE_MAX_FAILURES):
            await attacker.post("/api/admin/session", headers=WRONG_BEARER)
        locked = await attacker.post("/api/admin/session", headers=WRONG_BEARER)
    assert locked.status_code == 429, locked.text
    assert await redis_client.zcard(keys.THROTTLE_CLIENTS) == keys.THROTTLE_CLIENTS_MAX
