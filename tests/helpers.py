"""What the tests share, in one place (like httpx's `tests/common.py`): waiting for a
condition, the app and its configuration, the answers it gives, the processes and peers tests
start. Fixtures live in the `conftest.py` of the directory whose tests use them; test modules
import nothing from each other, only from here (and the peers in `tests/peers/`)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis
import uvicorn
from fastapi import FastAPI

from messageweave.app import create_app
from messageweave.mail.jmap import JmapClient
from messageweave.settings import Settings
from messageweave.store import keys

ADMIN_KEY = "ab" * 32
CYRUS_USER = "alice"
CYRUS_PASSWORD = "secret"
WAIT_S = 20.0  # for a worker, Cyrus and the emulator on a busy 2-core machine
DAY = 86_400


# ------------------------------------------------------------------------------ waiting


Described = str | Callable[[], object]


def _failure(what: Described, timeout_s: float) -> str:
    said = what() if callable(what) else what
    return f"not within {timeout_s} s: {said}"


async def eventually(check: Callable[[], Awaitable[bool]], what: Described,
                     timeout_s: float = WAIT_S) -> None:
    """Poll real state until `check()` holds. When time runs out, fails saying `what` was
    awaited (a callable is called then, e.g. to add what was last seen)."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, _failure(what, timeout_s)
        await asyncio.sleep(0.05)


def eventually_sync(check: Callable[[], bool], what: Described,
                    timeout_s: float = WAIT_S) -> None:
    """`eventually` for sync tests (the browser tests: Playwright's sync API)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, _failure(what, timeout_s)
        time.sleep(0.1)


# ------------------------------------------------------------------ the app and its peers


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


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


# ------------------------------------------------------------------------------ answers

HEX32 = re.compile(r"[0-9a-f]{32}")


def assert_envelope(response: httpx.Response, status: int, code: str) -> None:
    """The error answer is the envelope `{"error", "request_id"}` and nothing else."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "request_id"}
    assert body["error"] == code
    assert HEX32.fullmatch(body["request_id"])
    assert response.headers["x-request-id"] == body["request_id"]


def metric(text: str, name: str, labels: str = "") -> float | None:
    """One sample of a `/metrics` text (None when it is absent)."""
    pattern = re.escape(name) + (r"\{" + re.escape(labels) + r"\}" if labels else "") + r" (\S+)"
    found = re.search("^" + pattern + "$", text, re.MULTILINE)
    return float(found.group(1)) if found else None


def metric_value(text: str, name: str, labels: str = "") -> float:
    """One sample of a `/metrics` text, 0 when it is absent."""
    found = metric(text, name, labels)
    return found if found is not None else 0.0


# ------------------------------------------------------------------------------ time


def utc_date(unix_s: float) -> str:
    return datetime.fromtimestamp(int(unix_s), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def unix_of(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp())


class FakeClock:
    """Unix seconds that move only when a test says so."""

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else start

    def __call__(self) -> float:
        return self.now


# --- what src/ offers only through its real paths (issue #24: no test-only code in src/) ----


async def enqueue_mail(redis: aioredis.Redis, account_id: str, email_id: str) -> str | None:
    """Enqueue one mail the reconcile's way (`store.mailbox.enqueue_new_mails`): the new
    entry's id (its claim holds it), or None when the mail was claimed already."""
    from messageweave.store.mailbox import enqueue_new_mails

    if not await enqueue_new_mails(redis, account_id, [email_id]):
        return None
    entry: str | None = await redis.get(keys.dedup_jmap(account_id, email_id))
    return entry


async def enqueue_update(redis: aioredis.Redis, update_id: int,
                         fields: dict[str, str]) -> str | None:
    """Queue one Telegram update the webhook's way (`StreamStore.enqueue_updates_if_enabled`,
    `SwitchedOff` when the service is off): its entry id, None for a redelivery."""
    from messageweave.store.streams import StreamStore

    return (await StreamStore(redis).enqueue_updates_if_enabled([(update_id, fields)]))[0]


async def unknown_records(redis: aioredis.Redis) -> list[str]:
    """The members of `delivery:unknown_after_send`, oldest first."""
    return [str(m) for m in await redis.zrange(keys.DELIVERY_UNKNOWN, 0, -1)]

async def redis_text(redis: aioredis.Redis) -> str:
    """Every key of `redis` with its values (strings, hashes, lists, sets, sorted sets,
    streams) as one text, for a test that proves something is stored nowhere (issue #25)."""
    dumped = []
    for key in await redis.keys("*"):
        kind = await redis.type(key)
        values: list[Any]
        if kind == "string":
            values = [await redis.get(key)]
        elif kind == "hash":
            values = list((await redis.hgetall(key)).items())
        elif kind == "list":
            values = await redis.lrange(key, 0, -1)
        elif kind == "set":
            values = list(await redis.smembers(key))
        elif kind == "zset":
            values = await redis.zrange(key, 0, -1)
        elif kind == "stream":
            values = [fields for _, fields in await redis.xrange(key)]
        else:
            values = []
        dumped.append(f"{key} {values!r}")
    return "\n".join(dumped)
