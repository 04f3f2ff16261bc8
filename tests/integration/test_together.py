"""`store.together`: the upkeep commands of many accounts in one round trip (issue #37), on the
embedded Redis and on the real three-primary cluster.

Bugs caught: every account's lease renewed (and catch-up flag polled) one round trip each, ~110
a second at 200 idle accounts, each ~95 µs of CPU in redis-py (`docs/benchmarks.md`); one
command's error failing the others of its round trip; a caller cancelled meanwhile leaving the
others waiting forever; the loops not meeting on one grid, so nothing shares a round trip."""

from __future__ import annotations

import asyncio
import gc
import socket
import weakref

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from messageweave.store.locks import Lock
from messageweave.store.redis import open_redis
from messageweave.store.together import on_grid, together
from tests.helpers import flushed_redis
from tests.peers.redis_cluster import RedisClusterPeer

ACCOUNTS = 200


async def _connections_received(redis: aioredis.Redis) -> int:
    return int((await redis.info("stats"))["total_connections_received"])


async def test_two_hundred_leases_renewed_in_one_turn_take_one_connection(
        embedded_redis_url: str) -> None:
    async with flushed_redis(embedded_redis_url) as observer:
        locks = [Lock(observer, f"a:{{acc{n:03d}}}:lock:imap-idle", 15) for n in range(ACCOUNTS)]
        for lock in locks:
            assert await lock.acquire()
        taken_over = locks[7]
        await observer.set(taken_over.key, "another instance")
        renewing = await open_redis(embedded_redis_url)  # a client with no connection yet
        try:
            before = await _connections_received(observer)
            for lock in locks:
                lock.redis = renewing
            renewed = await asyncio.gather(*(lock.renew() for lock in locks))
            opened = await _connections_received(observer) - before
        finally:
            await renewing.aclose()
        # One round trip on one connection (one at a time, the pool opened up to 100 here).
        assert opened == 1
        assert renewed == [n != 7 for n in range(ACCOUNTS)]  # the lost lease says so, alone
        assert await observer.ttl(locks[0].key) > 0


async def test_a_commands_error_raises_in_its_caller_alone(embedded_redis_url: str) -> None:
    async with flushed_redis(embedded_redis_url) as redis:
        await redis.hset("a:{x}:not-a-flag", "field", "1")
        await redis.set("a:{y}:flag", "1")
        wrong, flag, missing = await asyncio.gather(
            together(redis, lambda pipe: pipe.getdel("a:{x}:not-a-flag")),
            together(redis, lambda pipe: pipe.getdel("a:{y}:flag")),
            together(redis, lambda pipe: pipe.getdel("a:{z}:flag")),
            return_exceptions=True)
        assert isinstance(wrong, ResponseError) and "WRONGTYPE" in str(wrong)
        assert flag == "1" and missing is None
        assert not await redis.exists("a:{y}:flag")  # its GETDEL ran


async def test_a_caller_cancelled_does_not_leave_the_others_waiting(
        embedded_redis_url: str) -> None:
    async with flushed_redis(embedded_redis_url) as redis:
        await redis.set("a:{y}:flag", "1")
        gone = asyncio.ensure_future(together(redis, lambda pipe: pipe.get("a:{x}:flag")))
        kept = asyncio.ensure_future(together(redis, lambda pipe: pipe.getdel("a:{y}:flag")))
        await asyncio.sleep(0)  # both queued in this turn
        gone.cancel()
        assert await asyncio.wait_for(kept, 5) == "1"
        assert gone.cancelled()


async def test_a_lost_connection_raises_in_every_caller() -> None:
    with socket.socket() as probe:  # a port nothing listens on: a real refusal
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    redis = aioredis.Redis(port=port, socket_connect_timeout=2)
    try:
        failures = await asyncio.gather(
            *(together(redis, lambda pipe, n=n: pipe.getdel(f"a:{{{n}}}:flag")) for n in range(3)),
            return_exceptions=True)
    finally:
        await redis.aclose()
    assert all(isinstance(f, RedisConnectionError) for f in failures), failures


async def test_renewals_on_a_cluster_reach_each_keys_node(
        redis_cluster: RedisClusterPeer) -> None:
    async with flushed_redis(redis_cluster.url) as redis:
        locks = [Lock(redis, f"a:{{acc{n:03d}}}:lock:imap-idle", 15) for n in range(30)]
        for lock in locks:
            assert await lock.acquire()
        await redis.delete(locks[3].key)  # expired meanwhile
        renewed = await asyncio.gather(*(lock.renew() for lock in locks))
        assert renewed == [n != 3 for n in range(30)]
        flags = [f"a:{{acc{n:03d}}}:reconcile:catchup:u" for n in range(30)]
        await redis.set(flags[5], "1")
        taken = await asyncio.gather(
            *(together(redis, lambda pipe, key=key: pipe.getdel(key)) for key in flags))
        assert [t is not None for t in taken] == [n == 5 for n in range(30)]


async def test_a_client_let_go_is_not_kept_alive(embedded_redis_url: str) -> None:
    """Catches the clients' registry holding each client for good (its entry's value kept a
    reference to its key): every client a process ever used, with its pool, never freed."""
    client = await open_redis(embedded_redis_url)
    assert await together(client, lambda pipe: pipe.ping()) is True
    await client.aclose()
    gone = weakref.ref(client)
    del client
    gc.collect()
    assert gone() is None


@pytest.mark.parametrize("every_s", [1.0, 5.0, 10.0, 15.0])
async def test_loops_waiting_on_the_grid_wake_together(every_s: float) -> None:
    loop = asyncio.get_running_loop()
    wakes = []
    for _ in range(3):
        wait = on_grid(every_s)
        assert every_s / 2 <= wait <= every_s * 1.5
        wakes.append(loop.time() + wait)
        await asyncio.sleep(0.01)
    # The same instant, whoever asked when, but for the microseconds between reading the clock
    # for the grid and setting the timer: below the millisecond the loop's epoll waits in, so
    # every such timer fires in one turn.
    assert max(wakes) - min(wakes) < 1e-3
    assert abs(wakes[0] / every_s - round(wakes[0] / every_s)) < 1e-3
