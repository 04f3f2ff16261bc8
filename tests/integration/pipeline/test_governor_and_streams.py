"""The Redis side of the pipeline on both real Redis versions: rate governor, XAUTOCLAIM."""

import asyncio
import time

from messageweave.pipeline.governor import Governor
from messageweave.store import keys
from messageweave.store.redis import connect
from messageweave.store.streams import StreamStore


async def test_one_message_per_second_per_private_chat_shared_by_instances(
    any_redis_url: str,
) -> None:
    a = connect(any_redis_url)
    b = connect(any_redis_url)
    try:
        await a.flushdb()
        first, second = Governor(a), Governor(b)  # two instances
        assert await first.wait_ms("1", 42) == 0
        wait = await second.wait_ms("1", 42)
        assert 900 <= wait <= 1000
        await asyncio.sleep(0.04)  # the bot lane (30/s) allows the next send
        assert await second.wait_ms("1", 43) == 0  # another chat has its own lane
        started = time.monotonic()
        await second.acquire("1", 42)
        assert time.monotonic() - started >= 0.85
    finally:
        await a.aclose()
        await b.aclose()


async def test_groups_get_20_per_minute_and_the_bot_30_per_second(any_redis_url: str) -> None:
    r = connect(any_redis_url)
    try:
        await r.flushdb()
        g = Governor(r)
        assert await g.wait_ms("1", -100) == 0
        assert 2900 <= await g.wait_ms("1", -100) <= 3000
        granted = 0
        for chat in range(1, 60):
            if await g.wait_ms("2", chat) == 0:
                granted += 1
        assert granted <= 31
    finally:
        await r.aclose()


async def test_a_429_pauses_the_chat_lane_everywhere(any_redis_url: str) -> None:
    r = connect(any_redis_url)
    try:
        await r.flushdb()
        await r.hset(keys.GOVERNOR_LIMITS, mapping={"bot_per_s": 0, "chat_per_s": 0})
        g = Governor(r)
        await g.pause("1", 42, 2)
        assert 1500 < await g.wait_ms("1", 42) <= 2000
        assert await g.wait_ms("1", 43) == 0
    finally:
        await r.aclose()


async def test_autoclaim_reads_both_reply_shapes(any_redis_url: str) -> None:
    r = connect(any_redis_url)
    try:
        await r.flushdb()
        store = StreamStore(r)
        await store.ensure_groups()
        entry = await store.add(keys.STREAM_JMAP, {"account_id": "a", "email_id": "e"})
        await store.read_new("stuck", 10, None)
        claimed = await store.autoclaim(keys.STREAM_JMAP, "rescuer", 0, 10)
        assert [(e.id, e.fields) for e in claimed] == [
            (entry, {"account_id": "a", "email_id": "e"})]
    finally:
        await r.aclose()
