"""Fixtures for the receivers that need no public URL (issue #22): Telegram long polling and
JMAP EventSource, against the real emulator and the real Cyrus."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import redis.asyncio as aioredis

from tests.helpers import until_label
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator
from tests.served import ServedApp, served_app


@pytest.fixture
async def polled(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> AsyncIterator[ServedApp]:
    """The app configured with the default `telegram_updates` (`auto`) and no webhook: it
    hears the owner through getUpdates only (no one can reach it: it is served in process)."""
    async with served_app(client, redis_client, cyrus, telegram_emulator,
                          telegram_updates="auto") as app:
        await until_label(client, "updates", "ok (polling)")
        yield app
