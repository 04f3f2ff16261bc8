"""The app configured against the real peers (Cyrus JMAP, the Bot API emulator) and switched on:
one class for the tests that drive it, whether it runs in process (the pipeline tests) or is
served over HTTPS (the conversation tests), and the helpers that configure it."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import redis.asyncio as aioredis

from messageweave.store import keys
from tests.helpers import CYRUS_PASSWORD, CYRUS_USER, enqueue_mail, login, sample_wire
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator

CHAT = 7001


def peer_wire(cyrus: CyrusServer, emulator: TelegramEmulator, **overrides: object) -> dict:
    """A valid wire for Cyrus's alice and the emulator, with a bot token of its own."""
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


async def _save_wire(client: httpx.AsyncClient, admin: dict[str, str],
                     wire: dict[str, Any]) -> None:
    saved = await client.put("/api/business-config", headers=admin, json=wire)
    assert saved.status_code == 200, saved.text
    assert saved.json()["runtime_applied"] is True, saved.text


async def configure(client: httpx.AsyncClient, wire: dict[str, Any],
                    outbound: dict[str, int] | None = None) -> dict[str, str]:
    """Save `wire` (and `outbound`) and switch the service on; the admin session's headers."""
    headers = await login(client)
    if outbound is not None:
        r = await client.put("/api/config", headers=headers, json=outbound)
        assert r.status_code == 200, r.text
    await _save_wire(client, headers, wire)
    enabled = await client.put("/api/enabled", headers=headers, json={"enabled": True})
    assert enabled.status_code == 200, enabled.text
    return headers


async def lift_limits(redis: aioredis.Redis) -> None:
    """No Telegram rate limit, so tests do not wait on the governor."""
    await redis.hset(keys.GOVERNOR_LIMITS,
                     mapping={"bot_per_s": 0, "chat_per_s": 0, "group_per_min": 0})


@dataclass
class ServedApp:
    """The app, configured with `wire` and switched on, and the peers it talks to."""

    client: httpx.AsyncClient  # the app's HTTP API (in process, or over HTTPS)
    redis: aioredis.Redis
    cyrus: CyrusServer
    emulator: TelegramEmulator
    wire: dict[str, Any]
    admin: dict[str, str]  # an admin session: the operator API needs one (the worker token: 403)

    @property
    def url(self) -> str:
        return str(self.client.base_url).rstrip("/")

    @property
    def token(self) -> str:
        return str(self.wire["bot_token"])

    @property
    def chat(self) -> int:
        return int(self.wire["telegram_chat_id"])

    async def configure(self, **overrides: Any) -> None:
        """Save the wire again, with `overrides`."""
        await _save_wire(self.client, self.admin, {**self.wire, **overrides})

    def append(self, subject: str, **kw: Any) -> str:
        """A mail appended to Cyrus; its email id."""
        return self.cyrus.append(subject=subject, **kw).email_id

    async def enqueue_mail(self, email_id: str, account_id: str = CYRUS_USER) -> str:
        """Queue the mail the way the reconcile does (its dedup claim, then the XADD), so a
        pass the app runs by itself (the start, a catch-up) does not queue it a second time;
        the entry that holds the mail (a pass's, when it claimed the mail first)."""
        entry = await enqueue_mail(self.redis, account_id, email_id)
        if entry is None:
            entry = await self.redis.get(keys.dedup_jmap(account_id, email_id))
        return str(entry)

    async def say(self, text: str, chat_id: int | None = None) -> int | None:
        """The owner writes (the app must be the emulator's webhook); returns the status our
        webhook answered the emulator."""
        delivery = await self.emulator.send_user_message(
            self.token, self.chat if chat_id is None else chat_id, text)
        assert delivery.error is None, delivery.error
        return delivery.status

    async def replies(self, count: int, timeout_s: float = 8.0) -> list[str]:
        sent = await self.emulator.wait_for_messages(self.token, self.chat, count, timeout_s)
        return [m.text for m in sent]


@asynccontextmanager
async def served_app(
    client: httpx.AsyncClient, redis: aioredis.Redis, cyrus: CyrusServer,
    emulator: TelegramEmulator, *, outbound: dict[str, int] | None = None,
    **wire: object,
) -> AsyncIterator[ServedApp]:
    """The app behind `client`, rate limits lifted, configured with `peer_wire(**wire)` (and
    `outbound`) and switched on; the emulator's injected failures are cleared afterwards."""
    await lift_limits(redis)
    full_wire = peer_wire(cyrus, emulator, **wire)
    admin = await configure(client, full_wire, outbound)
    try:
        yield ServedApp(client, redis, cyrus, emulator, full_wire, admin)
    finally:
        await emulator.clear_failures(full_wire["bot_token"])
