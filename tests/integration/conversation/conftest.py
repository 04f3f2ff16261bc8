"""Fixtures for the bot conversation: real Redis, real Cyrus mail, real fakellm, and (end to end)
the app served over HTTPS on a loopback port, reached by a Bot API emulator that plays the user.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from messageweave.config.model import parse_wire
from messageweave.config.outbound import OutboundConfig
from messageweave.mail.jmap import JmapClient
from tests.helpers import (
    CYRUS_PASSWORD,
    CYRUS_USER,
    Chat,
    sample_wire,
)
from tests.integration.conftest import served, tls_emulator
from tests.peers.cyrus import CyrusServer
from tests.peers.fakellm import fakellm_server

# `served` and `tls_emulator` are fixtures of tests/integration/conftest.py; named here only
# while tests/integration/reply/conftest.py (in progress) still imports them from this module.
__all__ = ["fakellm_server", "served", "tls_emulator"]

_chats = itertools.count(8_100_001)


@pytest.fixture
async def mailbox(cyrus: CyrusServer, trust_cyrus: None) -> AsyncIterator[JmapClient]:
    async with JmapClient(cyrus.origin + "/", CYRUS_USER, CYRUS_PASSWORD, timeout=10) as client:
        yield client


@pytest.fixture
def chat(redis_client: aioredis.Redis, mailbox: JmapClient) -> Chat:
    chat_id = next(_chats)
    config = parse_wire(sample_wire(telegram_chat_id=chat_id, chat_allowlist=[chat_id]))
    outbound = OutboundConfig(llm_timeout_ms=5000, max_retries=1)
    return Chat(chat_id, redis_client, mailbox, config, outbound)
