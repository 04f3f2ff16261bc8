"""The service's Redis client on a real Redis Cluster and a real Sentinel set (reference §7.18):
it reaches them by the URL forms of reference §4, runs the one-slot scripts wherever their
slot lives, and rides out a primary's `kill -9`."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
import redis
from redis.asyncio.cluster import RedisCluster

from messageweave import runtime
from messageweave.cli.diagnose import run_checks
from messageweave.pipeline.ledger import Ledger
from messageweave.store import keys
from messageweave.store.catchup import announce_catchup, relay_catchup_announcements
from messageweave.store.config_store import ConfigStore
from messageweave.store.redis import open_redis
from messageweave.store.streams import StreamStore
from tests.helpers import eventually, settings_for
from tests.peers.redis_cluster import RedisClusterPeer
from tests.peers.redis_sentinel import RedisSentinelPeer

RIDE_OUT_S = 30.0  # a failover of the peers takes 2 to 8 s


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
        assert isinstance(client, RedisCluster)
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
        node = client.get_node_from_key(key)  # its one replica has the write before the kill
        assert await client.execute_command("WAIT", 1, 5000, target_nodes=node) == 1
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
        assert await client.execute_command("WAIT", 2, 5000) == 2
        killed = own_sentinels.kill_primary()
        new = await asyncio.to_thread(own_sentinels.wait_failover, killed)
        await _until_it_answers(lambda: client.set("cursor", "8"))
        assert await client.get("cursor") == "8"
        with new.client() as direct:
            assert direct.get("cursor") == "8"
    finally:
        await client.aclose()


async def _redis_line(url: str) -> str:
    [line] = [c for c in await run_checks(settings_for(url)) if c.name == "redis"]
    assert line.status == "ok", line
    return line.detail


async def test_diagnose_names_a_cluster_its_primaries_and_slots(
        redis_cluster: RedisClusterPeer) -> None:
    """Catches: `diagnose` saying only "answers PING" for a cluster reached by `redis://`, so an
    operator cannot tell it is used as a cluster, nor see slots left uncovered."""
    detail = await _redis_line(redis_cluster.plain_url)
    assert detail == "answers PING (cluster: 3 primaries, 16384 of 16384 slots covered)"


async def test_diagnose_names_the_sentinels_primary_and_replicas(
        redis_sentinels: RedisSentinelPeer) -> None:
    """Catches: `diagnose` silent about which server the sentinels made primary, or failing
    on a sentinel URL it reads as one host."""
    primary = redis_sentinels.primary()
    detail = await _redis_line(redis_sentinels.url)
    assert detail == f"answers PING (sentinel mw-primary: primary 127.0.0.1:{primary.port}, "\
        "2 replicas)"


async def test_diagnose_names_a_single_server(debian_redis_url: str) -> None:
    """Catches: a single server described as a cluster or a sentinel set."""
    assert await _redis_line(debian_redis_url) == "answers PING (single server)"


async def test_a_worker_reads_both_streams_of_a_cluster(redis_cluster: RedisClusterPeer) -> None:
    """Catches: one XREADGROUP naming the mail and the Telegram streams, which live in two
    slots: a cluster refuses it ("all keys must map to the same key slot") and the worker
    reads nothing at all."""
    client = await open_redis(redis_cluster.url)
    streams = StreamStore(client)
    try:
        await client.delete(*keys.STREAMS)
        await streams.ensure_groups()
        await streams.add(keys.STREAM_JMAP, {"email_id": "m1"})
        await streams.add(keys.STREAM_TELEGRAM, {"update_id": "1"})
        got = await streams.read_new("w1", 10, 1000)
        assert sorted(e.stream for e in got) == sorted(keys.STREAMS)
        # Idle, it waits on each slot in turn and answers an entry of either.
        for stream in keys.STREAMS:
            waiting = asyncio.create_task(streams.read_new("w1", 10, 2000))
            await asyncio.sleep(0.05)  # most likely waiting by now; the result is the same
            await streams.add(stream, {"email_id": "m2"})
            assert [e.stream for e in await waiting] == [stream]
    finally:
        await client.aclose()


def _blocked_clients(cluster: RedisClusterPeer) -> int:
    return sum(int(str(n.info("clients")["blocked_clients"])) for n in cluster.live())


async def test_an_idle_worker_on_a_cluster_answers_an_entry_of_either_slot_at_once(
        redis_cluster: RedisClusterPeer) -> None:
    """Catches: an idle worker on a cluster waiting on one slot's streams at a time (`block_ms`
    split over the slots), so an entry of the slot it was not waiting on waited up to
    `block_ms`·(n−1)/n: a new mail reached the chat up to 500 ms late (bench/cluster.py: the
    EventSource delivery p99 +480 ms beside one server). Also: the other slots' reads are ended
    when one answers (no connection left blocked, nothing handed over and left pending)."""
    client = await open_redis(redis_cluster.url)
    streams = StreamStore(client)
    loop = asyncio.get_running_loop()

    async def waiting_on_a_node() -> bool:
        return _blocked_clients(redis_cluster) > 0
    try:
        await client.delete(*keys.STREAMS)
        await streams.ensure_groups()
        for n, stream in enumerate(keys.STREAMS):  # the slot waited on first, and the last
            waiting = asyncio.create_task(streams.read_new("w1", 10, 20_000))
            await eventually(waiting_on_a_node, "the idle read blocked on a node")
            added = loop.time()
            await streams.add(stream, {"email_id": f"m{n}"})
            assert [e.stream for e in await waiting] == [stream]
            assert loop.time() - added < 5  # waiting on one slot at a time: 10 s
            assert _blocked_clients(redis_cluster) == 0
            for other in keys.STREAMS:
                pending = await client.xpending(other, keys.CONSUMER_GROUP)
                assert pending["pending"] == (1 if other == stream else 0)
                if other == stream:
                    await client.xack(other, keys.CONSUMER_GROUP, pending["min"])
    finally:
        await client.aclose()


def _commands_run(nodes: list[redis.Redis]) -> Counter[str]:
    """The commands `nodes` ran so far, by name (`INFO commandstats`; ours on a connection
    each opened before)."""
    ran: Counter[str] = Counter()
    for node in nodes:
        for name, stats in node.info("commandstats").items():
            ran[name.removeprefix("cmdstat_")] += int(stats["calls"])
    return ran


async def test_an_idle_worker_on_a_cluster_sends_its_reads_and_nothing_else(
        redis_cluster: RedisClusterPeer) -> None:
    """Catches: an idle worker of four accounts on a cluster sending, every `block_ms`, two
    `COMMAND GETKEYS` before each slot's XREADGROUP without waiting (redis-py's cluster client
    asks a node where XREADGROUP's keys are, a round trip each), and a `CLIENT UNBLOCK` to
    every slot's wait but the first to time out, each on a connection opened for it: with 50
    accounts 258 commands/s and 24 ms of CPU a second, against 133 and 9 ms
    (`bench/cluster_idle.py`, reference §7.18). Each slot's reads are all it sends now."""
    client = await open_redis(redis_cluster.url)
    store = StreamStore(client)
    streams = (*(keys.AccountKeys(f"idle{n}").stream_jmap for n in range(4)),
               keys.STREAM_TELEGRAM)
    nodes = [node.client() for node in redis_cluster.live()]
    try:
        await client.delete(*streams)
        await store.ensure_groups(streams)
        assert not await store.read_new("idle", 10, 100, streams)  # its connections opened
        before = _commands_run(nodes)
        for _ in range(3):
            assert not await store.read_new("idle", 10, 100, streams)
        ran = _commands_run(nodes) - before
        assert ran["xreadgroup"] == 3 * 2 * len(streams), ran  # each slot's, then its wait
        assert not ran["command|getkeys"] and not ran["client|unblock"], ran
        assert not ran["hello"], f"connections opened while idle: {ran}"
    finally:
        for node in nodes:
            node.close()
        await client.aclose()


@pytest.mark.parametrize("peer", ["redis_cluster", "redis_sentinels"])
async def test_a_catchup_announcement_wakes_every_instance(
        peer: str, request: pytest.FixtureRequest) -> None:
    """Catches: the catch-up wake (one pub/sub channel) lost on a cluster, where the announcing
    and the listening instance may be connected to different nodes, or on a sentinel set."""
    url = request.getfixturevalue(peer).url
    announcer, listener = await open_redis(url), await open_redis(url)
    wake = asyncio.Event()
    relay = asyncio.create_task(relay_catchup_announcements(listener, wake))
    try:
        await asyncio.wait_for(wake.wait(), 10)  # subscribed
        wake.clear()
        await announce_catchup(announcer, "default")
        await asyncio.wait_for(wake.wait(), 10)
    finally:
        relay.cancel()
        await asyncio.gather(relay, return_exceptions=True)
        await announcer.aclose()
        await listener.aclose()


async def test_the_service_reached_by_a_plain_url_of_a_cluster_node_uses_the_cluster(
        redis_cluster: RedisClusterPeer) -> None:
    """Catches: `runtime.build_services` connected with `connect`, so a service given a plain
    `redis://` URL of one cluster node took it for a single server: every command on a slot
    that node does not own failed with MOVED (here: the configuration's, the stream's)."""
    async with runtime.running(settings_for(redis_cluster.plain_url)) as svc:
        assert isinstance(svc.redis, RedisCluster)
        await StreamStore(svc.redis).ensure_groups(list(keys.STREAMS))
        store = ConfigStore(svc.redis)
        await svc.redis.delete(keys.BUSINESS_CONFIG)
        assert await store.write_business_config("v1:e:f", None) >= 1
        assert await svc.redis.get(keys.BUSINESS_CONFIG) == "v1:e:f"


async def test_a_lease_of_a_live_worker_is_busy_for_another_on_a_cluster(
        redis_cluster: RedisClusterPeer) -> None:
    """Catches: `BEGIN` and `FINISH` read the lease holder's heartbeat under one
    deployment-wide name (`worker:heartbeat:<consumer>`), outside the entry's slot: a cluster
    refused the script (`non local key`) whenever another consumer held the lease, so the entry
    was interrupted again and again and a killed worker's mail stayed undelivered."""
    client = await open_redis(redis_cluster.url)
    try:
        streams = StreamStore(client)
        for stream in keys.STREAMS:
            await client.delete(stream)
        await streams.ensure_groups(list(keys.STREAMS))
        for stream in keys.STREAMS:
            entry_id = await streams.add(stream, {"email_id": "M1"})
            holder, other = Ledger(client, "holder-1"), Ledger(client, "other-2")
            await streams.beat("holder-1", [stream])
            assert (await holder.begin(stream, entry_id)).state == "go"
            assert (await other.begin(stream, entry_id)).state == "busy"  # the holder lives
            await streams.stop_beating("holder-1", [stream])
            assert (await other.begin(stream, entry_id)).state == "go"  # the holder is dead
    finally:
        await client.aclose()
