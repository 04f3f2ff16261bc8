"""Fixtures the integration packages share: the app configured against the real peers, in
process (`pipeline`) or served over HTTPS and registered as the webhook of an emulator that
trusts the test CA (`served`)."""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.mail.jmap import JmapClient
from tests.helpers import CYRUS_PASSWORD, CYRUS_USER
from tests.peers.cyrus import CyrusServer
from tests.peers.redis_cluster import RedisClusterPeer, running_cluster
from tests.peers.redis_sentinel import RedisSentinelPeer, running_sentinels
from tests.peers.telegram import TelegramEmulator
from tests.served import ServedApp, served_app, served_over_https

_chats = itertools.count(8_200_001)


@pytest.fixture
async def pipeline(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> AsyncIterator[ServedApp]:
    async with served_app(client, redis_client, cyrus, telegram_emulator) as app:
        yield app


@pytest.fixture
async def mailbox(cyrus: CyrusServer, trust_cyrus: None) -> AsyncIterator[JmapClient]:
    """A JMAP client of the test user's mailbox (the directories whose `mailbox` is another
    thing override it: mailbox/, telegram/test_buttons.py)."""
    async with JmapClient(cyrus.origin + "/", CYRUS_USER, CYRUS_PASSWORD, timeout=10) as client:
        yield client


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
    outbound = {"jmap_timeout_ms": 10000, "telegram_timeout_ms": 5000,
                "llm_timeout_ms": 5000, "max_retries": 1}
    async with served_over_https(redis_client, embedded_redis_url, cyrus, tls_emulator,
                                 outbound=outbound, telegram_chat_id=next(_chats)) as app:
        registered = await app.client.post("/api/telegram/register-webhook", headers=app.admin,
                                           json={"callback_url": f"{app.url}/webhook/tg"})
        assert registered.status_code == 200, registered.text
        yield app


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[RedisClusterPeer]:
    """A cluster of its own for a test that kills a primary (the session's stays whole)."""
    with running_cluster(tmp_path) as peer:
        yield peer


@pytest.fixture
def own_sentinels(tmp_path: Path) -> Iterator[RedisSentinelPeer]:
    """A Sentinel set of its own for a test that kills its primary."""
    with running_sentinels(tmp_path) as peer:
        yield peer
