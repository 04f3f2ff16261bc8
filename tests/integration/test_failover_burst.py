"""A deployment loses its Redis primary in the middle of a burst and loses no mail (issue #36,
reference §7.18): two service instances (`messageweave serve`, real processes) on a Redis
Cluster and on a Sentinel set of their own, 300 mails queued the way the reconcile queues them
(`tests.helpers.enqueue_mails`: Cyrus holds each mail, the stream its entry), `kill -9` of the
primary that holds the mail stream's slot while they are delivered, its replica promoted. Every
mail reaches the chat; a mail sent twice is one that was in flight at the kill, and shows as
`unknown_after_send` or twice in the send log. Through it `/healthz` answers, and `/ready`
finds Redis again once a primary serves."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack

import httpx

from messageweave.store import keys
from messageweave.store.redis import Redis, open_redis
from messageweave.store.streams import stream_name
from tests.helpers import (
    ADMIN_KEY,
    ServeProcess,
    configure,
    enqueue_mails,
    every_entry_finished,
    running_client,
    serve_process,
    settings_for,
    subject_of,
)
from tests.peers.cyrus import CyrusServer
from tests.peers.redis7 import RedisProcess
from tests.peers.redis_cluster import RedisClusterPeer
from tests.peers.redis_sentinel import RedisSentinelPeer
from tests.peers.telegram import TelegramEmulator
from tests.served import lift_limits, peer_wire

BURST = 300
KILL_AFTER = 60  # mails delivered before the kill
DELIVERED_WITHIN_S = 45.0


async def _in_flight(redis: Redis) -> int:
    """Entries read and not finished (the group's pending ones): those a kill can repeat."""
    summary = await redis.xpending(keys.STREAM_JMAP, keys.CONSUMER_GROUP)
    return int(summary["pending"])


async def _healthz_while(http: httpx.AsyncClient, instances: list[ServeProcess],
                         failover: Awaitable[object]) -> list[int]:
    """Every instance's `/healthz` answers, asked in turn until `failover` is over."""
    waiting = asyncio.ensure_future(failover)
    codes: list[int] = []
    while True:
        for served in instances:
            codes.append((await http.get(served.url + "/healthz", timeout=5)).status_code)
        if waiting.done():
            await waiting
            return codes
        await asyncio.sleep(0.1)


async def _redis_failed(http: httpx.AsyncClient, served: ServeProcess) -> bool:
    answer = await http.get(served.url + "/ready", timeout=10,
                            headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    return "redis" in answer.headers.get("x-ready-failed", "").split(",")


async def _through_the_kill(url: str, kill: Callable[[], None],
                            promoted: Callable[[], object], cyrus: CyrusServer,
                            emulator: TelegramEmulator) -> None:
    wire = peer_wire(cyrus, emulator)
    token, chat = str(wire["bot_token"]), int(wire["telegram_chat_id"])
    async with running_client(settings_for(url)) as client:
        await configure(client, wire, applied=True)
    redis = await open_redis(url)
    async with AsyncExitStack() as stack:
        stack.push_async_callback(redis.aclose)
        await lift_limits(redis)
        # Each send answers after 20 ms: the kill lands with sends under way.
        await emulator.fail(token=token, method="sendMessage", delay_ms=20)
        stack.push_async_callback(emulator.clear_failures, token)
        by_subject = await enqueue_mails(redis, cyrus, "failover", BURST)
        instances = [await stack.enter_async_context(serve_process(url)) for _ in range(2)]
        http = await stack.enter_async_context(httpx.AsyncClient())
        assert not await _redis_failed(http, instances[0])

        await emulator.wait_for_messages(token, chat, KILL_AFTER, 30.0)
        in_flight = await _in_flight(redis)
        kill()
        codes = await _healthz_while(http, instances, asyncio.to_thread(promoted))
        assert set(codes) == {200}, "/healthz stopped answering through the failover"

        sent = await emulator.wait_for_messages(token, chat, BURST, DELIVERED_WITHIN_S,
                                             unique=True)
        assert set(Counter(subject_of(m.text) for m in sent)) == set(by_subject), \
            "every mail is delivered"
        for served in instances:  # a primary serves: Redis is found again
            assert not await _redis_failed(http, served)
        await every_entry_finished(redis)  # a resend in flight has landed too
        sent = await emulator.sent_messages(token, chat)
        subjects = Counter(subject_of(m.text) for m in sent)
        repeats = {s: n - 1 for s, n in subjects.items() if n > 1}
        assert sum(repeats.values()) <= in_flight, f"{repeats} with {in_flight} in flight"
        unknown = set(await redis.zrange(keys.DELIVERY_UNKNOWN, 0, -1))
        logged = [json.loads(fields["r"]) for _, fields in await redis.xrange(keys.SEND_LOG)]
        records = Counter(r["event_id"] for r in logged if r["outcome"] == "delivered"
                          and r["stream"] == stream_name(keys.STREAM_JMAP))
        for subject in repeats:
            entry_id = by_subject[subject]
            assert f"{keys.STREAM_JMAP}/{entry_id}/resent" in unknown or records[entry_id] > 1, \
                f"{subject} was sent twice unseen"


async def test_a_cluster_primary_killed_mid_burst_loses_no_mail(
    own_cluster: RedisClusterPeer, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
    trust_cyrus: None,
) -> None:
    """Catches: mail lost or sent twice unseen when the cluster's primary of the mail stream's
    slot dies under two instances: a killed worker's lease read outside its slot (refused, so
    entries stayed undelivered), an intent acknowledged by the dead primary only (a repeat
    not flagged), an instance that stops answering or never finds the promoted replica."""
    await _through_the_kill(
        own_cluster.url, lambda: own_cluster.kill_primary_of(keys.STREAM_JMAP),
        lambda: own_cluster.wait_failover(keys.STREAM_JMAP), cyrus, telegram_emulator)


async def test_a_sentinel_primary_killed_mid_burst_loses_no_mail(
    own_sentinels: RedisSentinelPeer, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
    trust_cyrus: None,
) -> None:
    """Catches: mail lost or sent twice unseen when the Sentinel set's primary dies under two
    instances: writes acknowledged by the dead primary only, an instance that keeps talking to
    it, or one whose loops do not resume on the promoted replica."""
    killed: list[RedisProcess] = []
    await _through_the_kill(
        own_sentinels.url, lambda: killed.append(own_sentinels.kill_primary()),
        lambda: own_sentinels.wait_failover(killed[0]), cyrus, telegram_emulator)
