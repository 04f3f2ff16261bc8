"""The routes behind the admin page's first hour without a public URL (issue #22, part 3):
what a failed registration says, and what the delivery card counts. Real Redis (both
versions where it matters), the real Cyrus and the Bot API emulator."""

from __future__ import annotations

import secrets

import httpx
import redis.asyncio as aioredis

from messageweave.store import keys
from messageweave.store.streams import StreamStore
from tests.helpers import assert_envelope, login, sample_wire
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator
from tests.served import peer_wire


async def test_the_delivery_figures_tell_waiting_from_delivered(either_redis: aioredis.Redis
                                                                ) -> None:
    """Catches the Delivery card's "Queue" counting delivered entries (XLEN keeps them until
    the trim): a stream of three entries, one sent and acknowledged, one being sent, one not
    read yet, has one unread, one pending. Redis 7 answers `lag`; Redis 6.2 is counted."""
    stream = keys.STREAM_JMAP
    await either_redis.xgroup_create(stream, keys.CONSUMER_GROUP, id="$", mkstream=True)
    store = StreamStore(either_redis)
    assert await store.stats(stream) == {"length": 0, "unread": 0, "pending": 0, "dlq": 0}
    ids = [await either_redis.xadd(stream, {"account_id": "a", "email_id": f"e{n}"})
           for n in range(3)]
    assert (await store.stats(stream))["unread"] == 3
    await either_redis.xreadgroup(keys.CONSUMER_GROUP, "w1", {stream: ">"}, count=2)
    await either_redis.xack(stream, keys.CONSUMER_GROUP, ids[0])
    assert await store.stats(stream) == {"length": 3, "unread": 1, "pending": 1, "dlq": 0}
    assert (await StreamStore(either_redis).stats(keys.STREAM_TELEGRAM))["unread"] == 0


async def test_push_registration_on_a_server_without_push_subscription_says_so(
    client: httpx.AsyncClient, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
    trust_cyrus: None,
) -> None:
    """Catches "Mail push: failed (service_unavailable, 503)" on the page for a mail server
    that simply has no PushSubscription (Cyrus 3.6 answers `unknownMethod`): a retry can never
    work, and the page must say why (EventSource or the periodic reconcile bring mail)."""
    headers = await login(client)
    saved = await client.put("/api/business-config", headers=headers,
                             json=peer_wire(cyrus, telegram_emulator))
    assert saved.json()["runtime_applied"] is True, saved.text
    response = await client.post("/api/push/register", headers=headers,
                                 json={"callback_url": "https://bot.example.org/push/jmap"})
    assert_envelope(response, 502, "push_not_supported")
    assert "retry-after" not in response.headers


async def test_a_refused_webhook_says_what_telegram_said(
    client: httpx.AsyncClient, telegram_emulator: TelegramEmulator,
) -> None:
    """Catches "Telegram webhook: failed (telegram_send_failed, 502)" with the reason only in
    the log: Telegram's own words come back in `x-telegram-error`, without the token."""
    token = f"{secrets.randbelow(10**9)}:{secrets.token_urlsafe(20)}"
    headers = await login(client)
    await client.put("/api/business-config", headers=headers, json=sample_wire(
        bot_token=token, telegram_api_base_url=telegram_emulator.base_url))
    await telegram_emulator.fail(
        token=token, method="setWebhook", error_code=400,
        description=f"Bad Request: bad webhook: Failed to resolve host /bot{token}")
    response = await client.post("/api/telegram/register-webhook", headers=headers,
                                 json={"callback_url": "https://bot.example.org/webhook/tg"})
    assert_envelope(response, 502, "telegram_send_failed")
    assert response.headers["x-telegram-error"] == (
        "Bad Request: bad webhook: Failed to resolve host /bot<token>")
    await telegram_emulator.clear_failures(token)
