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
import uvicorn

from messageweave.app import create_app
from messageweave.services import Services
from messageweave.store import keys
from tests.helpers import (
    CYRUS_PASSWORD,
    CYRUS_USER,
    configure,
    enqueue_mail,
    fastapi_of,
    free_port,
    sample_wire,
    save_wire,
    serving,
    settings_for,
)
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
    asgi: object | None = None  # the app served over HTTPS (`services` reads its state)

    @property
    def services(self) -> Services:
        """The served app's own `Services`, to run a worker step in the test (over HTTPS)."""
        assert self.asgi is not None, "only served_over_https keeps its app"
        services: Services = fastapi_of(self.asgi).state.services
        return services

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
        await save_wire(self.client, self.admin, {**self.wire, **overrides}, applied=True)

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
    asgi: object | None = None, **wire: object,
) -> AsyncIterator[ServedApp]:
    """The app behind `client`, rate limits lifted, configured with `peer_wire(**wire)` (and
    `outbound`) and switched on; the emulator's injected failures are cleared afterwards."""
    await lift_limits(redis)
    full_wire = peer_wire(cyrus, emulator, **wire)
    admin = await configure(client, full_wire, outbound, applied=True)
    try:
        yield ServedApp(client, redis, cyrus, emulator, full_wire, admin, asgi)
    finally:
        await emulator.clear_failures(full_wire["bot_token"])


def peer_wire_for(jmap_url: str, emulator: TelegramEmulator, **overrides: object) -> dict:
    """`peer_wire` for another JMAP server (the push responder), with no periodic reconcile."""
    values: dict[str, object] = {
        "jmap_session_url": jmap_url, "telegram_api_base_url": emulator.base_url,
        "bot_token": f"{secrets.randbelow(10**9)}:{secrets.token_urlsafe(20)}",
        "reconcile_interval_s": 0,
    }
    values.update(overrides)
    return sample_wire(**values)


@asynccontextmanager
async def served_over_https(
    redis: aioredis.Redis, redis_url: str, cyrus: CyrusServer, emulator: TelegramEmulator, *,
    outbound: dict[str, int] | None = None, **wire: object,
) -> AsyncIterator[ServedApp]:
    """`served_app` for the app served by uvicorn on https://127.0.0.1:{port} (Cyrus's test
    certificate), so an emulator that trusts the test CA can call its webhook the way Telegram
    does (Telegram only calls https URLs)."""
    port = free_port()
    asgi = create_app(settings_for(redis_url))
    server = uvicorn.Server(uvicorn.Config(
        asgi, host="127.0.0.1", port=port,
        ssl_certfile=str(cyrus.server_cert), ssl_keyfile=str(cyrus.server_key),
        log_config=None, access_log=False, lifespan="on", timeout_graceful_shutdown=3,
    ))
    api = httpx.AsyncClient(base_url=f"https://127.0.0.1:{port}", verify=cyrus.ssl_context(),
                            timeout=15, trust_env=False)
    async with serving(server), api, served_app(api, redis, cyrus, emulator, outbound=outbound,
                                                asgi=asgi, **wire) as app:
        yield app
