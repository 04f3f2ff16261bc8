"""`GET /metrics`: protected, and its values move with what happens."""

from __future__ import annotations

import re

import httpx
import redis.asyncio as aioredis

from messageweave.ops.sendlog import record_send
from messageweave.store import keys
from tests.conftest import login, sample_wire
from tests.integration.ops.conftest import debug_headers
from tests.integration.test_envelope import assert_envelope
from tests.integration.test_ready_with_peers import peer_wire
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator


def value(text: str, name: str, labels: str = "") -> float:
    pattern = re.escape(name) + (r"\{" + re.escape(labels) + r"\}" if labels else "") + r" (\S+)"
    found = re.search("^" + pattern + "$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def test_metrics_need_the_worker_token_or_a_session(client: httpx.AsyncClient) -> None:
    assert_envelope(await client.get("/metrics"), 401, "unauthorized")
    await client.put("/api/business-config", headers=await login(client), json=sample_wire())
    response = await client.get("/metrics", headers={"Authorization": "Bearer worker-SECRET"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert value(response.text, "messageweave_config_revision") == 1
    assert value(response.text, "messageweave_redis_up") == 1


async def test_stream_length_and_dlq_size_follow_redis(
    client: httpx.AsyncClient, redis_client: aioredis.Redis,
) -> None:
    session = await login(client)
    before = (await client.get("/metrics", headers=session)).text
    assert value(before, "messageweave_stream_length", 'stream="stalwart:jmap"') == 0
    await redis_client.xadd(keys.STREAM_JMAP, {"k": "v"})
    await redis_client.xadd(keys.STREAM_JMAP, {"k": "v"})
    await redis_client.xadd(keys.dlq(keys.STREAM_TELEGRAM), {"k": "v"})
    after = (await client.get("/metrics", headers=session)).text
    assert value(after, "messageweave_stream_length", 'stream="stalwart:jmap"') == 2
    assert value(after, "messageweave_dlq_size", 'stream="stalwart:telegram"') == 1


async def test_a_recorded_delivery_moves_the_delivery_counters(
    client: httpx.AsyncClient, redis_client: aioredis.Redis,
) -> None:
    session = await login(client)
    label = 'failure_class="rate_limit",outcome="retry"'
    before = value((await client.get("/metrics", headers=session)).text,
                   "messageweave_deliveries_total", label)
    await record_send(redis_client, stream=keys.STREAM_TELEGRAM, event_id="1-0", kind="reply",
                      chat_id=1, outcome="retry", failure_class="rate_limit", latency_ms=5)
    after = value((await client.get("/metrics", headers=session)).text,
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
    before = value((await debug_client.get("/metrics", headers=session)).text,
                   "messageweave_peer_calls_total", label)
    assert (await debug_client.post("/debug/notify", headers=debug_headers())).status_code == 200
    after = value((await debug_client.get("/metrics", headers=session)).text,
                  "messageweave_peer_calls_total", label)
    assert after == before + 1


async def test_unknown_after_send_follows_the_pipeline_key(
    client: httpx.AsyncClient, redis_client: aioredis.Redis,
) -> None:
    session = await login(client)
    key = keys.DELIVERY_UNKNOWN
    await redis_client.zadd(key, {"stalwart:jmap/1-0/sent": 1.0, "stalwart:jmap/2-0/sent": 2.0})
    text = (await client.get("/metrics", headers=session)).text
    assert value(text, "messageweave_unknown_after_send") == 2
