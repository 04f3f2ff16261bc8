"""Issue #14: the webhook checks the switch, claims the update and queues it in one Redis round
trip (`store.streams.ENQUEUE_IF_ENABLED`), shared by the requests of a burst (`UpdateIngress`).
Its answers must be the ones of the three separate steps it replaced: the script against both
real Redis versions, the route against the app."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from messageweave.store import keys
from messageweave.store.streams import SwitchedOff, UpdateIngress
from tests.helpers import (
    all_keys,
    assert_envelope,
    configured_and_enabled,
    enqueue_update,
    sample_wire,
)

FIELDS = {"update_id": "77", "chat_id": "4242", "text": "hi"}
SECRET = {"X-Telegram-Bot-Api-Secret-Token": str(sample_wire()["telegram_webhook_secret"])}


@pytest.fixture
def redis(either_redis: aioredis.Redis) -> aioredis.Redis:
    """Redis 6.2 and 7.0, flushed."""
    return either_redis


@pytest.mark.parametrize("switch", [None, "0", "yes"])
async def test_the_script_writes_nothing_unless_the_switch_is_on(
    redis: aioredis.Redis, switch: str | None,
) -> None:
    if switch is not None:
        await redis.set(keys.ENABLED, switch)
    with pytest.raises(SwitchedOff):
        await enqueue_update(redis, 77, FIELDS)
    assert await all_keys(redis) == ([keys.ENABLED] if switch is not None else [])


async def test_the_script_queues_an_update_once_and_answers_a_redelivery_none(
    redis: aioredis.Redis,
) -> None:
    await redis.set(keys.ENABLED, "1")
    entry = await enqueue_update(redis, 77, FIELDS)
    assert entry is not None
    assert await redis.xrange(keys.STREAM_TELEGRAM) == [(entry, FIELDS)]
    assert 0 < await redis.ttl(keys.dedup_tg(77)) <= keys.DEDUP_TTL_S
    assert await enqueue_update(redis, 77, FIELDS) is None
    assert await redis.xlen(keys.STREAM_TELEGRAM) == 1
    assert await enqueue_update(redis, 78, {"update_id": "78"}) is not None


async def test_the_script_is_loaded_again_after_a_script_flush(redis: aioredis.Redis) -> None:
    """EVALSHA fails with NOSCRIPT on a Redis that never saw the script (or was restarted)."""
    await redis.set(keys.ENABLED, "1")
    await redis.script_flush()
    assert await enqueue_update(redis, 79, {"update_id": "79"})
    assert await enqueue_update(redis, 80, {"update_id": "80"})
    assert await redis.xlen(keys.STREAM_TELEGRAM) == 2


async def test_switched_off_the_webhook_answers_503_whatever_the_body(
    client: httpx.AsyncClient, redis_client: aioredis.Redis,
) -> None:
    """Bug guard: the switch is now read after the body; a body the webhook refuses must still
    get the 503 it got when the switch was read first, and nothing may be written."""
    await configured_and_enabled(client)
    accepted = await client.post("/webhook/tg", headers=SECRET, json={"update_id": 10})
    assert accepted.status_code == 204
    await redis_client.set(keys.ENABLED, "0")
    for body in (b"not json", b'{"update_id":"1"}', b'{"update_id":11,"message":{"chat":{}}}',
                 b'{"update_id":12,"message":{"chat":{"id":999},"text":"hi"}}',
                 b'{"update_id":13}', b'{"update_id":10}'):
        assert_envelope(await client.post("/webhook/tg", headers=SECRET, content=body),
                        503, "service_unavailable")
    assert not [n for n in (11, 12, 13) if await redis_client.exists(keys.dedup_tg(n))]
    assert_envelope(await client.post("/webhook/tg", content=b"not json"), 401, "unauthorized")
    await redis_client.set(keys.ENABLED, "1")
    assert (await client.post("/webhook/tg", headers=SECRET,
                              json={"update_id": 10})).status_code == 204  # a redelivery


async def _script_runs(redis: aioredis.Redis) -> int:
    stats = await redis.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
               for name in ("evalsha", "eval"))


async def test_a_burst_of_updates_is_queued_in_one_script_run_each_once_in_order(
    redis: aioredis.Redis,
) -> None:
    """Catches the webhook's burst costing a round trip per update (issue #14) and the batch
    losing what the single script guaranteed: each update queued once, in arrival order, a
    redelivery inside the same burst answered None."""
    await redis.set(keys.ENABLED, "1")
    await redis.config_resetstat()
    ingress = UpdateIngress(redis)
    ids = [*range(100, 130), 105, 117]  # two redeliveries in the same burst
    answers = await asyncio.gather(*(ingress.enqueue_if_enabled(n, {"update_id": str(n)})
                                     for n in ids))
    assert [a is None for a in answers] == [False] * 30 + [True, True]
    rows = await redis.xrange(keys.STREAM_TELEGRAM)
    assert [fields["update_id"] for _, fields in rows] == [str(n) for n in range(100, 130)]
    assert [entry for entry, _ in rows] == answers[:30]
    assert await _script_runs(redis) <= 2  # NOSCRIPT costs the first run a second call


async def test_a_switched_off_burst_fails_every_update_and_writes_nothing(
    redis: aioredis.Redis,
) -> None:
    await redis.set(keys.ENABLED, "0")
    ingress = UpdateIngress(redis)
    outcomes = await asyncio.gather(*(ingress.enqueue_if_enabled(n, {"update_id": str(n)})
                                      for n in range(10)), return_exceptions=True)
    assert all(isinstance(o, SwitchedOff) for o in outcomes)
    assert await all_keys(redis) == [keys.ENABLED]


async def test_a_burst_through_the_webhook_answers_each_request_and_claims_each_update(
    client: httpx.AsyncClient, redis_client: aioredis.Redis,
) -> None:
    """The route end to end: 24 requests at once (two of them redeliveries) are each answered
    204, and every update is claimed exactly as when they came one by one."""
    await configured_and_enabled(client)
    ids = [*range(500, 522), 503, 510]
    answers = await asyncio.gather(*(client.post("/webhook/tg", headers=SECRET,
                                                 json={"update_id": n}) for n in ids))
    assert [a.status_code for a in answers] == [204] * len(ids)
    assert all([await redis_client.exists(keys.dedup_tg(n)) for n in ids])


async def test_an_update_whose_entry_cannot_be_written_keeps_no_claim(
    redis: aioredis.Redis,
) -> None:
    """Catches an update lost for good: the script claimed `dedup:tg` and then the XADD failed
    (here the stream's key holds a string), so the request was answered 503 and Telegram's
    redelivery was taken for a duplicate and dropped. The claim must go with the failure, and
    the updates of the same run before it stay queued (their redelivery is the duplicate)."""
    await redis.set(keys.ENABLED, "1")
    await redis.set(keys.STREAM_TELEGRAM, "not a stream")
    ingress = UpdateIngress(redis)
    outcomes = await asyncio.gather(*(ingress.enqueue_if_enabled(n, {"update_id": str(n)})
                                      for n in (41, 42)), return_exceptions=True)
    assert all(isinstance(o, ResponseError) for o in outcomes), outcomes
    assert not await redis.exists(keys.dedup_tg(41), keys.dedup_tg(42))
    await redis.delete(keys.STREAM_TELEGRAM)
    assert await ingress.enqueue_if_enabled(41, {"update_id": "41"}) is not None  # redelivered
    assert [f["update_id"] for _, f in await redis.xrange(keys.STREAM_TELEGRAM)] == ["41"]
