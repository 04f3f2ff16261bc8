"""The service's Redis client on a real Redis Cluster and a real Sentinel set (reference §7.18):
it reaches them by the URL forms of reference §4, runs the one-slot scripts wherever their
slot lives, and rides out a primary's `kill -9`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from messageweave.store import keys
from messageweave.store.redis import open_redis
from messageweave.store.redis_url import is_cluster
from messageweave.store.state import ConfigStore
from tests.peers.redis_cluster import RedisClusterPeer, running_cluster
from tests.peers.redis_sentinel import RedisSentinelPeer, running_sentinels

RIDE_OUT_S = 30.0  # a failover of the peers takes 2 to 8 s


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[RedisClusterPeer]:
    """A cluster of its own for a test that kills a primary (the session's stays whole)."""
    with running_cluster(tmp_path) as peer:
        yield peer


@pytest.fixture
def own_sentinels(tmp_path: Path) -> Iterator[RedisSentinelPeer]:
    with running_sentinels(tmp_path) as peer:
        yield peer


async def _until_it_answers(call: object) -> object:
    """Retry `call` (an async callable) until the failover is over: the client reconnects."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + RIDE_OUT_S
    while True:
        try:
            return await call()  # type: ignore[operator]
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError,
                redis.exceptions.ClusterError):
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.1)


async def test_a_cluster_reached_by_a_plain_url_runs_scripts_on_every_primary(
        redis_cluster: RedisClusterPeer) -> None:
    """Catches: a cluster reached by `redis://` treated as a single server, its scripts and
    transactions refused with MOVED for every slot the seed node does not own."""
    client = await open_redis(redis_cluster.plain_url)
    try:
        assert is_cluster(client)
        # Configuration writes are scripts plus a transaction, on the `{cfg}` slot: wherever
        # it lives, the seed node is one primary of three.
        store = ConfigStore(client)
        await client.delete(keys.BUSINESS_CONFIG)
        revision = await store.write_business_config("v1:a:b", None)
        assert await store.write_business_config("v1:c:d", revision) == revision + 1
        assert await client.get(keys.BUSINESS_CONFIG) == "v1:c:d"
        owners = {redis_cluster.primary_of(f"a:{{{n}}}:x").port for n in range(12)}
        assert len(owners) == 3  # the keys below are spread over every primary
        for n in range(12):
            await client.set(f"a:{{{n}}}:x", n)
        found = [k async for k in client.scan_iter(match="a:{*}:x", count=100)]
        assert sorted(found) == sorted(f"a:{{{n}}}:x" for n in range(12))
    finally:
        await client.aclose()


async def test_a_sentinel_url_writes_to_the_primary_the_sentinels_name(
        redis_sentinels: RedisSentinelPeer) -> None:
    """Catches: a `redis+sentinel://` URL read as a plain host (the first sentinel taken for the
    data server), or the data password sent to the sentinels."""
    client = await open_redis(redis_sentinels.url)
    try:
        await client.set("topology:probe", "sentinel")
        with redis_sentinels.primary().client() as direct:
            assert direct.get("topology:probe") == "sentinel"
    finally:
        await client.aclose()


async def test_the_cluster_client_rides_out_a_killed_primary(own_cluster: RedisClusterPeer) -> None:
    """Catches: a client that keeps calling the dead primary of a slot (or gives up) after its
    replica took over: every command on that slot fails until a restart."""
    client = await open_redis(own_cluster.url)
    key = "a:{failover}:cursor"
    try:
        await client.set(key, "42")
        await client.execute_command("WAIT", 1, 5000, target_nodes=client.get_node_from_key(key))
        killed = own_cluster.kill_primary_of(key)
        new = await asyncio.to_thread(own_cluster.wait_failover, key)
        assert new.port != killed.port
        assert await _until_it_answers(lambda: client.get(key)) == "42"
        assert await client.incr(key) == 43
    finally:
        await client.aclose()


async def test_the_sentinel_client_follows_the_promoted_replica(
        own_sentinels: RedisSentinelPeer) -> None:
    """Catches: a client pinned to the address the sentinels gave at connect time, writing to a
    dead server (or to a demoted replica: READONLY) after the failover."""
    client = await open_redis(own_sentinels.url)
    try:
        await client.set("cursor", "7")
        await client.execute_command("WAIT", 2, 5000)
        killed = own_sentinels.kill_primary()
        new = await asyncio.to_thread(own_sentinels.wait_failover, killed)
        await _until_it_answers(lambda: client.set("cursor", "8"))
        assert await client.get("cursor") == "8"
        with new.client() as direct:
            assert direct.get("cursor") == "8"
    finally:
        await client.aclose()
