"""A configured, enabled app wired to the real peers (Cyrus JMAP, the Bot API emulator)."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave import app as app_module
from messageweave.api.services import Services
from messageweave.config.service import ConfigService
from messageweave.store import keys
from messageweave.store.redis import connect
from messageweave.store.state import ConfigStore
from messageweave.version import build_version
from tests.conftest import (
    CYRUS_PASSWORD,
    CYRUS_USER,
    login,
    running_client,
    sample_wire,
    settings_for,
)
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
                    outbound: dict[str, int] | None = None) -> dict[str, str]:
    """Save `wire` (and `outbound`) and switch the service on; the admin session's headers."""
    headers = await login(client)
    if outbound is not None:
        r = await client.put("/api/config", headers=headers, json=outbound)
        assert r.status_code == 200, r.text
    saved = await client.put("/api/business-config", headers=headers, json=wire)
    assert saved.status_code == 200, saved.text
    assert saved.json()["runtime_applied"] is True, saved.text
    enabled = await client.put("/api/enabled", headers=headers, json={"enabled": True})
    assert enabled.status_code == 200, enabled.text
    return headers


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
    admin: dict[str, str]  # an admin session: the operator API needs one (the worker token: 403)

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
    admin = await configure(client, wire)
    yield Pipeline(client, redis_client, cyrus, telegram_emulator, wire, admin)
    await telegram_emulator.clear_failures(wire["bot_token"])


def subject_of(text: str) -> str:
    """The subject line of a three-line notification."""
    return text.split("\n")[1].removeprefix("Subject: ")


async def enqueue_mails(redis: aioredis.Redis, cyrus: CyrusServer, prefix: str,
                        count: int) -> dict[str, str]:
    """Append `count` mails to Cyrus and queue them; subject → stream entry id."""
    by_subject = {}
    for n in range(count):
        subject = f"{prefix} {n:03d}"
        email_id = cyrus.append(subject=subject).email_id
        by_subject[subject] = str(await redis.xadd(
            keys.STREAM_JMAP, {"account_id": CYRUS_USER, "email_id": email_id}))
    return by_subject


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


@pytest.fixture
async def cron_only(
    embedded_redis_url: str, redis_client: aioredis.Redis, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator, trust_cyrus: None, monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Pipeline]:
    """A configured instance whose continuous worker never runs, and no other worker on its
    Redis: whatever reaches Telegram was sent by a request to this app (`POST /worker`) or by
    a `Worker` the test drives itself."""

    async def no_worker(svc: Services) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(app_module, "run_worker", no_worker)
    async with running_client(settings_for(embedded_redis_url)) as client:
        await lift_limits(redis_client)
        wire = peer_wire(cyrus, telegram_emulator)
        admin = await configure(client, wire)
        yield Pipeline(client, redis_client, cyrus, telegram_emulator, wire, admin)
    await telegram_emulator.clear_failures(wire["bot_token"])


@asynccontextmanager
async def worker_services(redis_url: str) -> AsyncIterator[Services]:
    """The stored configuration loaded into services of our own, wired like `messageweave
    drain`, for tests that drive a `Worker` directly."""
    settings = settings_for(redis_url)
    redis = connect(redis_url)
    store = ConfigStore(redis)
    svc = Services(settings=settings, redis=redis, store=store,
                   config=ConfigService(store, settings.encryption_key), version=build_version())
    try:
        await svc.config.refresh()
        assert svc.config.runtime is not None
        yield svc
    finally:
        await svc.config.aclose()
        await redis.aclose()

