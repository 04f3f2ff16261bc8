"""A configured, enabled app wired to the real peers (Cyrus JMAP, the Bot API emulator)."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.store import keys
from tests.conftest import CYRUS_PASSWORD, CYRUS_USER, login, sample_wire
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator

CHAT = 7001


def peer_wire(cyrus: CyrusServer, emulator: TelegramEmulator, **overrides: object) -> dict:
    chat = int(overrides.pop("telegram_chat_id", CHAT))  # type: ignore[call-overload]
    values: dict[str, object] = {
        "jmap_session_url": cyrus.origin + "/",
        "jmap_username": CYRUS_USER,
        "jmap_password": CYRUS_PASSWORD,
        "telegram_api_base_url": emulator.base_url,
        "bot_token": f"{secrets.randbelow(10**9)}:{secrets.token_urlsafe(20)}",
        "telegram_chat_id": chat,
        "chat_allowlist": [chat],
        "timezone": "Asia/Tokyo",
    }
    values.update(overrides)
    return sample_wire(**values)


async def configure(client: httpx.AsyncClient, wire: dict[str, Any],
                    outbound: dict[str, int] | None = None) -> None:
    headers = await login(client)
    if outbound is not None:
        r = await client.put("/api/config", headers=headers, json=outbound)
        assert r.status_code == 200, r.text
    saved = await client.put("/api/business-config", headers=headers, json=wire)
    assert saved.status_code == 200, saved.text
    assert saved.json()["runtime_applied"] is True, saved.text
    enabled = await client.put("/api/enabled", headers=headers, json={"enabled": True})
    assert enabled.status_code == 200, enabled.text


async def lift_limits(redis: aioredis.Redis) -> None:
    await redis.hset(keys.GOVERNOR_LIMITS,
                     mapping={"bot_per_s": 0, "chat_per_s": 0, "group_per_min": 0})


@dataclass
class Pipeline:
    client: httpx.AsyncClient
    redis: aioredis.Redis
    cyrus: CyrusServer
    emulator: TelegramEmulator
    wire: dict[str, Any]

    @property
    def token(self) -> str:
        return str(self.wire["bot_token"])

    @property
    def chat(self) -> int:
        return int(self.wire["telegram_chat_id"])

    async def enqueue_mail(self, email_id: str, account_id: str = CYRUS_USER) -> str:
        return str(await self.redis.xadd(keys.STREAM_JMAP,
                                         {"account_id": account_id, "email_id": email_id}))

    def append(self, subject: str, **kw: Any) -> str:
        return self.cyrus.append(subject=subject, **kw).email_id


@pytest.fixture
async def pipeline(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> AsyncIterator[Pipeline]:
    await lift_limits(redis_client)
    wire = peer_wire(cyrus, telegram_emulator)
    await configure(client, wire)
    yield Pipeline(client, redis_client, cyrus, telegram_emulator, wire)
    await telegram_emulator.clear_failures(wire["bot_token"])


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)
