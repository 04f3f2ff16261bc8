"""Switching between long polling and a webhook while the owner writes (issue #22): every
message answered once, whichever way it came. The app is served over HTTPS so the emulator
(which trusts the test CA) can call its webhook the way Telegram does."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from messageweave.pipeline import polling
from messageweave.store import keys
from tests.helpers import eventually, until_status
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator
from tests.served import ServedApp, served_over_https

MESSAGES = 30


@pytest.fixture
async def https_app(
    redis_client: aioredis.Redis, embedded_redis_url: str, cyrus: CyrusServer,
    tls_emulator: TelegramEmulator, trust_cyrus: None,
) -> AsyncIterator[ServedApp]:
    """The app on https://127.0.0.1:{port}, `telegram_updates` auto, no webhook yet."""
    async with served_over_https(redis_client, embedded_redis_url, cyrus, tls_emulator,
                                 telegram_updates="auto") as app:
        await until_status(app, "updates", "ok (polling)")
        yield app


async def _write(app: ServedApp, first: int, last: int) -> None:
    """The owner writes `/search wN` for N in [first, last), one after the other."""
    for n in range(first, last):
        delivery = await app.emulator.send_user_message(app.token, app.chat, f"/search w{n}")
        assert delivery.error is None, delivery


def _answered(texts: list[str]) -> Counter[str]:
    """How often each `wN` was answered (the reply's first line names the query)."""
    return Counter(t.split("「", 1)[1].split("」", 1)[0] for t in texts if "「" in t)


async def test_polling_webhook_polling_loses_and_doubles_nothing(https_app: ServedApp) -> None:
    """Catches: updates lost or answered twice across a switch: the long poll in flight when
    the webhook is registered (its updates unconfirmed, so Telegram hands them to the webhook
    too), and the updates Telegram still holds when the webhook is deleted again."""
    app = https_app
    writer = asyncio.create_task(_write(app, 0, MESSAGES // 3))
    register = await app.client.post("/api/telegram/register-webhook", headers=app.admin,
                                     json={"callback_url": f"{app.url}/webhook/tg"})
    assert register.status_code == 200, register.text
    await until_status(app, "updates", "ok (webhook)")
    await writer
    await _write(app, MESSAGES // 3, 2 * MESSAGES // 3)  # through the webhook
    writer = asyncio.create_task(_write(app, 2 * MESSAGES // 3, MESSAGES))
    deleted = await app.client.post("/api/telegram/delete-webhook", headers=app.admin)
    assert deleted.status_code == 200, deleted.text
    await writer
    await until_status(app, "updates", "ok (polling)")

    async def all_answered() -> bool:
        texts = [m.text for m in await app.emulator.sent_messages(app.token, app.chat)]
        return len(_answered(texts)) == MESSAGES
    await eventually(all_answered, "every message answered", 60)

    async def drained() -> bool:
        return await app.redis.xlen(keys.STREAM_TELEGRAM) == 0
    await eventually(drained, "the stream worked off")
    texts = [m.text for m in await app.emulator.sent_messages(app.token, app.chat)]
    counts = _answered(texts)
    assert set(counts) == {f"w{n}" for n in range(MESSAGES)}
    assert [q for q, c in counts.items() if c != 1] == [], counts
    queue = await app.emulator.pending_updates(app.token)
    assert queue.pending == []


async def test_register_webhook_is_refused_while_polling_is_chosen(https_app: ServedApp) -> None:
    """Catches: a webhook registered under `telegram_updates: polling`, which the poller would
    delete again at once (a page that offers a dead end)."""
    await https_app.configure(telegram_updates="polling")
    refused = await https_app.client.post(
        "/api/telegram/register-webhook", headers=https_app.admin,
        json={"callback_url": f"{https_app.url}/webhook/tg"})
    assert refused.status_code == 409
    assert refused.json()["error"] == "telegram_updates_polling"
    info = await https_app.emulator.bot_api(https_app.token, "getWebhookInfo", {})
    assert info.result["url"] == ""


async def test_a_webhook_registered_in_webhook_mode_is_reported_at_once(
    https_app: ServedApp,
) -> None:
    """Catches the page saying "no webhook is registered" for up to a minute (the `webhook`
    mode's watch interval, `WEBHOOK_WATCH_S`) after the owner registered one on it: the
    instance that registered it looks again at once."""
    await https_app.configure(telegram_updates="webhook")
    await until_status(https_app, "updates", "degraded: no webhook is registered")
    register = await https_app.client.post(
        "/api/telegram/register-webhook", headers=https_app.admin,
        json={"callback_url": f"{https_app.url}/webhook/tg"})
    assert register.status_code == 200, register.text
    await until_status(https_app, "updates", "ok (webhook)", timeout_s=polling.WEBHOOK_CHECK_S)
