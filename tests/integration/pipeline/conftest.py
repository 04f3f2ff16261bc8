"""A configured, enabled app wired to the real peers (Cyrus JMAP, the Bot API emulator)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from messageweave import runtime
from messageweave.services import Services
from tests.helpers import running_client, settings_for
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator
from tests.served import ServedApp, served_app


@pytest.fixture
async def cron_only(
    embedded_redis_url: str, redis_client: aioredis.Redis, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator, trust_cyrus: None, monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[ServedApp]:
    """A configured instance whose continuous worker never runs, and no other worker on its
    Redis: whatever reaches Telegram was sent by a request to this app (`POST /worker`) or by
    a `Worker` the test drives itself."""

    async def no_worker(svc: Services) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(runtime, "run_worker", no_worker)
    async with running_client(settings_for(embedded_redis_url)) as client, served_app(
            client, redis_client, cyrus, telegram_emulator) as app:
        yield app


