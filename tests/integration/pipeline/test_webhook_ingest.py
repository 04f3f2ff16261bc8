"""Issue #14: the webhook checks the switch, claims the update and queues it in one Redis round
trip (`store.streams.ENQUEUE_IF_ENABLED`). Its answers must be the ones of the three separate
steps it replaced: the script against both real Redis versions, the route against the app."""

from __future__ import annotations

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.store import keys
from messageweave.store.streams import StreamStore, SwitchedOff
from tests.conftest import sample_wire
from tests.integration.security import test_owner_words
from tests.integration.security.test_input_limits import configured_and_enabled
from tests.integration.test_envelope import assert_envelope

FIELDS = {"update_id": "77", "chat_id": "4242", "text": "hi"}
SECRET = {"X-Telegram-Bot-Api-Secret-Token": str(sample_wire()["telegram_webhook_secret"])}


redis = test_owner_words.either_redis  # Redis 6.2 and 7.0, flushed


@pytest.mark.parametrize("switch", [None, "0", "yes"])
async def test_the_script_writes_nothing_unless_the_switch_is_on(
    redis: aioredis.Redis, switch: str | None,
) -> None:
    if switch is not None:
        await redis.set(keys.ENABLED, switch)
    with pytest.raises(SwitchedOff):
        await StreamStore(redis).enqueue_update_if_enabled(77, FIELDS)
    assert await redis.keys("*") == ([keys.ENABLED] if switch is not None else [])


async def test_the_script_queues_an_update_once_and_answers_a_redelivery_none(
    redis: aioredis.Redis,
) -> None:
    await redis.set(keys.ENABLED, "1")
    store = StreamStore(redis)
    entry = await store.enqueue_update_if_enabled(77, FIELDS)
    assert entry is not None
    assert await redis.xrange(keys.STREAM_TELEGRAM) == [(entry, FIELDS)]
    assert 0 < await redis.ttl(keys.dedup_tg(77)) <= keys.DEDUP_TTL_S
    assert await store.enqueue_update_if_enabled(77, FIELDS) is None
    assert await redis.xlen(keys.STREAM_TELEGRAM) == 1
    # the same claim as the script it extends: a claim by either one holds for the other
    assert await store.enqueue_update(77, FIELDS) is None
    assert await store.enqueue_update_if_enabled(78, {"update_id": "78"}) is not None
    assert await store.enqueue_update(78, {"update_id": "78"}) is None


async def test_the_script_is_loaded_again_after_a_script_flush(redis: aioredis.Redis) -> None:
    """EVALSHA fails with NOSCRIPT on a Redis that never saw the script (or was restarted)."""
    await redis.set(keys.ENABLED, "1")
    await redis.script_flush()
    assert await StreamStore(redis).enqueue_update_if_enabled(79, {"update_id": "79"})
    assert await StreamStore(redis).enqueue_update_if_enabled(80, {"update_id": "80"})
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
