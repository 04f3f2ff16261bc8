"""Fixtures for the bot conversation: real Redis, real Cyrus mail, real fakellm, and (end to end)
the app served over HTTPS on a loopback port, reached by a Bot API emulator that plays the user.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest
import redis.asyncio as aioredis

from messageweave.config.model import BusinessConfig, parse_wire
from messageweave.config.outbound import OutboundConfig
from messageweave.mail.jmap import JmapClient
from messageweave.pipeline.conversation import ConversationContext, IncomingMessage, reply_to_update
from tests.helpers import (
    CYRUS_PASSWORD,
    CYRUS_USER,
    sample_wire,
)
from tests.integration.conftest import served, tls_emulator
from tests.peers.cyrus import CyrusServer
from tests.peers.fakellm import FakeLlm, fakellm_server

# `served` and `tls_emulator` are fixtures of tests/integration/conftest.py; named here only
# while tests/integration/reply/conftest.py (in progress) still imports them from this module.
__all__ = ["fakellm_server", "served", "tls_emulator"]

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
