"""`GET /metrics`: protected, and its values move with what happens."""

from __future__ import annotations

import time

import httpx
import redis.asyncio as aioredis

from messageweave.ops.sendlog import record_send
from messageweave.store import keys
from messageweave.store.config_store import sha256_hex
from messageweave.store.push import Registration, update_lifecycle
from tests.helpers import (
    assert_envelope,
    debug_headers,
    login,
    metric,
    metric_value,
    sample_wire,
    unix_of,
)
from tests.integration.mailbox.push_server import PushServer, callback_path
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator
from tests.served import peer_wire


async def test_metrics_need_the_worker_token_or_a_session(client: httpx.AsyncClient) -> None:
    assert_envelope(await client.get("/metrics"), 401, "unauthorized")
    await client.put("/api/business-config", headers=await login(client), json=sample_wire())
    response = await client.get("/metrics", headers={"Authorization": "Bearer worker-token-SECRET"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert metric_value(response.text, "messageweave_config_revision") == 1
    assert metric_value(response.text, "messageweave_redis_up") == 1


async def test_stream_length_and_dlq_size_follow_redis(
    client: httpx.AsyncClient, redis_client: aioredis.Redis,
) -> None:
    session = await login(client)
    before = (await client.get("/metrics", headers=session)).text
    assert metric_value(before, "messageweave_stream_length", 'stream="stalwart:jmap"') == 0
    await redis_client.xadd(keys.STREAM_JMAP, {"k": "v"})
    await redis_client.xadd(keys.STREAM_JMAP, {"k": "v"})
    await redis_client.xadd(keys.dlq(keys.STREAM_TELEGRAM), {"k": "v"})
    after = (await client.get("/metrics", headers=session)).text
    assert metric_value(after, "messageweave_stream_length", 'stream="stalwart:jmap"') == 2
    assert metric_value(after, "messageweave_dlq_size", 'stream="stalwart:telegram"') == 1


async def test_a_recorded_delivery_moves_the_delivery_counters(
    client: httpx.AsyncClient, redis_client: aioredis.Redis,
) -> None:
    session = await login(client)
    label = 'failure_class="rate_limit",outcome="retry"'
    before = metric_value((await client.get("/metrics", headers=session)).text,
                   "messageweave_deliveries_total", label)
    await record_send(redis_client, stream=keys.STREAM_TELEGRAM, event_id="1-0", kind="reply",
                      chat_id=1, outcome="retry", failure_class="rate_limit", latency_ms=5)
    after = metric_value((await client.get("/metrics", headers=session)).text,
                  "messageweave_deliveries_total", label)
    assert after == before + 1


async def test_a_debug_notify_counts_a_telegram_call(
    debug_client: httpx.AsyncClient, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
    trust_cyrus: None,
) -> None:
    session = await login(debug_client)
    await debug_client.put("/api/business-config", headers=session,
                           json=peer_wire(cyrus, telegram_emulator))
    label = 'peer="telegram",result="ok"'
    before = metric_value((await debug_client.get("/metrics", headers=session)).text,
                   "messageweave_peer_calls_total", label)
    assert (await debug_client.post("/debug/notify", headers=debug_headers())).status_code == 200
    after = metric_value((await debug_client.get("/metrics", headers=session)).text,
                  "messageweave_peer_calls_total", label)
    assert after == before + 1


async def test_unknown_after_send_follows_the_pipeline_key(
    client: httpx.AsyncClient, redis_client: aioredis.Redis,
) -> None:
    session = await login(client)
    key = keys.DELIVERY_UNKNOWN
    await redis_client.zadd(key, {"stalwart:jmap/1-0/sent": 1.0, "stalwart:jmap/2-0/sent": 2.0})
    text = (await client.get("/metrics", headers=session)).text
    assert metric_value(text, "messageweave_unknown_after_send") == 2


AGE = "messageweave_push_last_state_change_age_seconds"
EXPIRY = "messageweave_push_subscription_expiry_timestamp_seconds"
DEGRADED = "messageweave_push_degraded"


async def test_push_metrics_show_the_last_state_change_age_and_the_expiry(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, cyrus: CyrusServer,
    trust_cyrus: None,
) -> None:
    """Bug caught (issue #11): nothing exported when pushes last arrived nor when the
    subscription ends, so a dead push was invisible to monitoring. Both are read from Redis at
    scrape time, so every instance reports the same."""
    session = await login(client)
    await redis_client.set(keys.PUSH_MAINTENANCE_SCHEDULE, "test", ex=600)  # no pass meddles
    async with PushServer(cyrus) as server:
        wire = sample_wire(jmap_session_url=server.url, reconcile_interval_s=0)
        await client.put("/api/business-config", headers=session, json=wire)
        await client.put("/api/enabled", headers=session, json={"enabled": True})
        off = (await client.get("/metrics", headers=session)).text
        assert metric(off, AGE) is None and metric(off, EXPIRY) is None  # nothing yet
        assert metric(off, DEGRADED) == 0

        registered = await client.post("/api/push/register", headers=session,
                                       json={"callback_url": "https://bot.example.org/push"})
        sub_id = registered.json()["push_subscription_id"]
        granted = unix_of(server.responder.subscriptions[sub_id]["expires"])
        text = (await client.get("/metrics", headers=session)).text
        assert metric(text, EXPIRY) == granted and metric(text, AGE) is None

        # the operator's callback path here is not /push/jmap: post where the route is
        pushed_to = "/push/jmap?" + callback_path(
            server.responder.subscriptions[sub_id]["url"]).split("?", 1)[1]
        verification = {"@type": "PushVerification", "pushSubscriptionId": sub_id,
                        "verificationCode": server.responder.codes[sub_id]}
        assert (await client.post(pushed_to, json=verification)).status_code == 204
        state_change = {"@type": "StateChange", "changed": {"u1": {"Email": "s2"}}}
        assert (await client.post(pushed_to, json=state_change)).status_code == 204
        text = (await client.get("/metrics", headers=session)).text
        age = metric(text, AGE)
        assert age is not None and 0 <= age < 3
        # it is an age computed at scrape time from the recorded arrival
        await redis_client.set(keys.PUSH_LAST_STATE_CHANGE, str(int(time.time()) - 42))
        age = metric((await client.get("/metrics", headers=session)).text, AGE)
        assert age is not None and 42 <= age < 45

        reg = Registration(sha256_hex("https://bot.example.org/push"), sub_id)
        await update_lifecycle(redis_client, reg, {"failure": "recreate_failed"})
        assert metric((await client.get("/metrics", headers=session)).text, DEGRADED) == 1
