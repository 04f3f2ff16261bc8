"""Fixtures for the bot conversation: real Redis, real Cyrus mail, real fakellm, and (end to end)
the app served over HTTPS on a loopback port, reached by a Bot API emulator that plays the user.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
import uvicorn

from messageweave.app import create_app
from messageweave.config.model import BusinessConfig, parse_wire
from messageweave.config.outbound import OutboundConfig
from messageweave.mail.jmap import JmapClient
from messageweave.pipeline.conversation import ConversationContext, IncomingMessage, reply_to_update
from tests.helpers import (
    CYRUS_PASSWORD,
    CYRUS_USER,
    free_port,
    sample_wire,
    serving,
    settings_for,
)
from tests.peers.cyrus import CyrusServer
from tests.peers.fakellm import FakeLlm, fakellm_server
from tests.peers.telegram import TelegramEmulator
from tests.served import ServedApp, served_app

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

    def speaking(self, language: str) -> Chat:
        """The same chat with the bot set to `bot_language`."""
        wire = {**self.config.to_wire(), "bot_language": language}
        return Chat(self.chat_id, self.redis, self.mailbox, parse_wire(wire), self.outbound,
                    self.now)


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


@pytest.fixture
async def served(
    redis_client: aioredis.Redis, embedded_redis_url: str, cyrus: CyrusServer,
    tls_emulator: TelegramEmulator, trust_cyrus: None,
) -> AsyncIterator[ServedApp]:
    """The app on https://127.0.0.1:{port}, configured, enabled and registered as the webhook."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(
        create_app(settings_for(embedded_redis_url)), host="127.0.0.1", port=port,
        ssl_certfile=str(cyrus.server_cert), ssl_keyfile=str(cyrus.server_key),
        log_config=None, access_log=False, lifespan="on", timeout_graceful_shutdown=3,
    ))
    api = httpx.AsyncClient(base_url=f"https://127.0.0.1:{port}", verify=cyrus.ssl_context(),
                            timeout=15, trust_env=False)
    outbound = {"jmap_timeout_ms": 10000, "telegram_timeout_ms": 5000,
                "llm_timeout_ms": 5000, "max_retries": 1}
    async with serving(server), api, served_app(api, redis_client, cyrus, tls_emulator,
                                                outbound=outbound,
                                                telegram_chat_id=next(_chats)) as app:
        registered = await api.post("/api/telegram/register-webhook", headers=app.admin,
                                    json={"callback_url": f"{app.url}/webhook/tg"})
        assert registered.status_code == 200, registered.text
        yield app
