"""Fixtures for the bot conversation: real Redis, real Cyrus mail, real fakellm, and (end to end)
the app served over HTTPS on a loopback port, reached by a Bot API emulator that plays the user.
"""

from __future__ import annotations

import itertools

import pytest
import redis.asyncio as aioredis

from messageweave.config.model import parse_wire
from messageweave.config.outbound import OutboundConfig
from messageweave.mail.jmap import JmapClient
from tests.helpers import (
    Chat,
    sample_wire,
)
from tests.peers.fakellm import fakellm_server

__all__ = ["fakellm_server"]

_chats = itertools.count(8_100_001)


@pytest.fixture
def chat(redis_client: aioredis.Redis, mailbox: JmapClient) -> Chat:
    chat_id = next(_chats)
    config = parse_wire(sample_wire(telegram_chat_id=chat_id, chat_allowlist=[chat_id]))
    outbound = OutboundConfig(llm_timeout_ms=5000, max_retries=1)
    return Chat(chat_id, redis_client, mailbox, config, outbound)
