"""`GET /api/accounts/{id}/status` (issue #35, SPEC G.3): the figures are the account's own."""

from __future__ import annotations

import time
from datetime import datetime

import httpx
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from messageweave.ops.sendlog import Outcome, record_send
from messageweave.store import keys
from messageweave.store.keys import AccountKeys
from messageweave.store.oplog import send_log
from tests.integration.test_accounts import with_family

DEFAULT_STREAM, FAMILY_STREAM = keys.STREAM_JMAP, AccountKeys("family").stream_jmap
DEFAULT_CHAT, FAMILY_CHAT = 4242, 5151  # `first_save`'s chat, `family_wire`'s


async def _queue(redis: aioredis.Redis, stream: str, *, unread: int, pending: int,
                 dead: int) -> None:
    """Entries as the pipeline leaves them: `pending` read by a consumer and not finished,
    `unread` not read yet, `dead` in the dead letters."""
    try:
        await redis.xgroup_create(stream, keys.CONSUMER_GROUP, id="$", mkstream=True)
    except ResponseError:  # the worker made it already
        pass
    for i in range(pending):
        await redis.xadd(stream, {"email_id": f"P{i}"})
    if pending:
        await redis.xreadgroup(keys.CONSUMER_GROUP, "a-busy-worker", {stream: ">"},
                               count=pending)
    for i in range(unread):
        await redis.xadd(stream, {"email_id": f"U{i}"})
    for i in range(dead):
        await redis.xadd(keys.dlq(stream), {"email_id": f"D{i}"})


async def _delivered(redis: aioredis.Redis, stream: str, chat: int) -> tuple[float, float]:
    """One notification delivered from `stream` to `chat`, recorded as the pipeline does; the
    time span it was recorded in."""
    before = time.time()
    await record_send(redis, stream=stream, event_id=f"{time.time_ns()}-0", kind="mail",
                      chat_id=chat, outcome=Outcome.DELIVERED)
    return before, time.time()


def _at(status: dict[str, object]) -> float:
    value = status["last_notified_at"]
    assert isinstance(value, str), status
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


async def test_each_accounts_status_counts_its_own_queue_and_notifications(
    client: httpx.AsyncClient, redis_client: aioredis.Redis,
) -> None:
    """Catches an account's status that shows another account's figures: its `waiting` or `dlq`
    counted on another stream, or a `last_notified_at` that is another account's notification
    (one sent to a chat before it moved to this account), or none at all because the other
    account sent thousands since (a scan of the newest send-log records stopped before
    reaching this account's)."""
    admin = await with_family(client)
    for account in ("default", "family"):  # no worker reads their streams meanwhile
        assert (await client.put(f"/api/accounts/{account}/enabled", headers=admin,
                                 json={"enabled": False})).status_code == 200
    await _queue(redis_client, FAMILY_STREAM, unread=3, pending=2, dead=1)
    await _queue(redis_client, DEFAULT_STREAM, unread=1, pending=0, dead=4)

    family_sent = await _delivered(redis_client, FAMILY_STREAM, FAMILY_CHAT)
    # Then `default` notifies family's second chat (it was default's before it moved), and its
    # own chat thousands of times.
    await _delivered(redis_client, DEFAULT_STREAM, 5152)
    busy = [{"stream": "stalwart:jmap", "account": "default", "event_id": f"{i}-0",
             "kind": "mail", "chat_id": DEFAULT_CHAT, "outcome": "delivered"}
            for i in range(5100)]  # as `record_send` writes them, in one round trip
    await send_log(redis_client).append_many(busy)
    default_sent = await _delivered(redis_client, DEFAULT_STREAM, DEFAULT_CHAT)

    family = (await client.get("/api/accounts/family/status", headers=admin)).json()
    default = (await client.get("/api/accounts/default/status", headers=admin)).json()
    assert (family["waiting"], family["dlq"]) == (5, 1)
    assert (default["waiting"], default["dlq"]) == (1, 4)
    assert family_sent[0] - 0.01 <= _at(family) <= family_sent[1] + 0.01, family
    assert default_sent[0] - 0.01 <= _at(default) <= default_sent[1] + 0.01, default
