"""Fixtures for the bot conversation: real Redis, real Cyrus mail, real fakellm, and (end to end)
the app served over HTTPS on a loopback port, reached by a Bot API emulator that plays the user.
"""

from __future__ import annotations

import itertools
import os
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
import uvicorn

from messageweave.app import create_app
from messageweave.chat.conversation import ConversationContext, IncomingMessage, reply_to_update
from messageweave.config.model import BusinessConfig, OutboundConfig, parse_wire
from messageweave.mail.jmap import JmapClient
from messageweave.store import keys
from tests.conftest import (
    CYRUS_PASSWORD,
    CYRUS_USER,
    admin_headers,
    free_port,
    sample_wire,
    serving,
    settings_for,
)
from tests.peers.cyrus import CyrusServer
from tests.peers.fakellm import FakeLlm, fakellm_server
from tests.peers.telegram import TelegramEmulator

__all__ = ["fakellm_server"]

_chats = itertools.count(8_100_001)


def llm_wire(fakellm: FakeLlm | str, model: str = "summarizer") -> dict[str, Any]:
    base = fakellm if isinstance(fakellm, str) else fakellm.base_url
    return {"llm_enabled": True, "llm_allow_net": True, "llm_base_url": base,
            "llm_api_key": "llm-key-SECRET", "llm_model": model}


@pytest.fixture
async def mailbox(cyrus: CyrusServer, trust_cyrus: None) -> AsyncIterator[JmapClient]:
    async with JmapClient(cyrus.origin + "/", CYRUS_USER, CYRUS_PASSWORD, timeout=10) as client:
        yield client


@dataclass
class Chat:
    """One owner chat talking to the conversation directly (no webhook, no worker)."""

    chat_id: int
    redis: aioredis.Redis
    mailbox: JmapClient
    config: BusinessConfig
    outbound: OutboundConfig
    now: Callable[[], float] = time.time

    async def say(self, text: str) -> list[str]:
        async def jmap() -> JmapClient:
            return self.mailbox

        ctx = ConversationContext(self.redis, self.config, self.outbound, jmap=jmap, now=self.now)
        replies = await reply_to_update(IncomingMessage(self.chat_id, text), ctx)
        assert all(r.chat_id == self.chat_id for r in replies)
        return [r.text for r in replies]

    def with_llm(self, fakellm: FakeLlm | str, model: str = "summarizer", **outbound: int) -> Chat:
        wire = {**self.config.to_wire(), **llm_wire(fakellm, model)}
        return Chat(self.chat_id, self.redis, self.mailbox, parse_wire(wire),
                    OutboundConfig(**{**self.outbound.to_json(), **outbound}), self.now)


@pytest.fixture
def chat(redis_client: aioredis.Redis, mailbox: JmapClient) -> Chat:
    chat_id = next(_chats)
    config = parse_wire(sample_wire(telegram_chat_id=chat_id, chat_allowlist=[chat_id]))
    outbound = OutboundConfig(llm_timeout_ms=5000, max_retries=1)
    return Chat(chat_id, redis_client, mailbox, config, outbound)


# --- end to end: emulator → https /webhook/tg → stream → worker → sendMessage → emulator ------


@pytest.fixture(scope="module")
def tls_emulator(
    cyrus: CyrusServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TelegramEmulator]:
    """An emulator of its own that trusts the test CA, so it can call an HTTPS webhook the way
    Telegram does (Telegram only calls https URLs)."""
    previous = os.environ.get("NODE_EXTRA_CA_CERTS")
    os.environ["NODE_EXTRA_CA_CERTS"] = str(cyrus.ca_file)
    try:
        emulator = TelegramEmulator.start(tmp_path_factory.mktemp("tls-emulator"))
    finally:
        if previous is None:
            del os.environ["NODE_EXTRA_CA_CERTS"]
        else:
            os.environ["NODE_EXTRA_CA_CERTS"] = previous
    try:
        yield emulator
    finally:
        emulator.stop()


@dataclass
class Served:
    """The app on https://127.0.0.1:{port}, configured, enabled and registered as the webhook."""

    url: str
    api: httpx.AsyncClient
    redis: aioredis.Redis
    emulator: TelegramEmulator
    cyrus: CyrusServer
    wire: dict[str, Any]
    headers: dict[str, str]

    @property
    def token(self) -> str:
        return str(self.wire["bot_token"])

    @property
    def chat(self) -> int:
        return int(self.wire["telegram_chat_id"])

    async def say(self, text: str, chat_id: int | None = None) -> int | None:
        """The owner writes; returns the status our webhook answered the emulator."""
        delivery = await self.emulator.send_user_message(
            self.token, self.chat if chat_id is None else chat_id, text)
        assert delivery.error is None, delivery.error
        return delivery.status

    async def replies(self, count: int, timeout_s: float = 8.0) -> list[str]:
        sent = await self.emulator.wait_for_messages(self.token, self.chat, count, timeout_s)
        return [m.text for m in sent]

    async def configure(self, **overrides: Any) -> None:
        response = await self.api.put("/api/business-config", headers=self.headers,
                                      json={**self.wire, **overrides})
        assert response.status_code == 200, response.text
        assert response.json()["runtime_applied"] is True, response.text


@pytest.fixture
async def served(
    redis_client: aioredis.Redis, embedded_redis_url: str, cyrus: CyrusServer,
    tls_emulator: TelegramEmulator, trust_cyrus: None,
) -> AsyncIterator[Served]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(
        create_app(settings_for(embedded_redis_url)), host="127.0.0.1", port=port,
        ssl_certfile=str(cyrus.server_cert), ssl_keyfile=str(cyrus.server_key),
        log_config=None, access_log=False, lifespan="on", timeout_graceful_shutdown=3,
    ))
    url = f"https://127.0.0.1:{port}"
    chat_id = next(_chats)
    wire = sample_wire(
        jmap_session_url=cyrus.origin + "/", jmap_username=CYRUS_USER,
        jmap_password=CYRUS_PASSWORD, telegram_api_base_url=tls_emulator.base_url,
        bot_token=f"{secrets.randbelow(10**9)}:{secrets.token_urlsafe(20)}",
        telegram_chat_id=chat_id, chat_allowlist=[chat_id],
    )
    await redis_client.hset(keys.GOVERNOR_LIMITS,
                            mapping={"bot_per_s": 0, "chat_per_s": 0, "group_per_min": 0})
    async with serving(server), httpx.AsyncClient(
            base_url=url, verify=cyrus.ssl_context(), timeout=15, trust_env=False) as api:
        login = await api.post("/api/admin/session", headers=admin_headers())
        assert login.status_code == 200, login.text
        headers = {"Authorization": f"Bearer {login.json()['session']}"}
        outbound = {"jmap_timeout_ms": 10000, "telegram_timeout_ms": 5000,
                    "llm_timeout_ms": 5000, "max_retries": 1}
        assert (await api.put("/api/config", headers=headers, json=outbound)
                ).status_code == 200
        served = Served(url, api, redis_client, tls_emulator, cyrus, wire, headers)
        await served.configure()
        enabled = await api.put("/api/enabled", headers=headers, json={"enabled": True})
        assert enabled.status_code == 200, enabled.text
        registered = await api.post("/api/telegram/register-webhook", headers=headers,
                                    json={"callback_url": f"{url}/webhook/tg"})
        assert registered.status_code == 200, registered.text
        yield served

