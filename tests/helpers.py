"""What the tests share, in one place (like httpx's `tests/common.py`), by section: waiting for
a condition (`eventually`), the app and its configuration, the answers it gives, the processes
tests start, clients of the peers, mail and the pipeline, time, the admin page in a browser.

Fixtures live in the `conftest.py` of the directory whose tests use them (tests/conftest.py for
every package, tests/integration/conftest.py for the integration packages) and are built from
these helpers; test modules import nothing from each other or from a conftest, only from here,
tests/served.py (the app configured against the real peers) and tests/peers/."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import email.utils
import json
import os
import random
import re
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.message import EmailMessage
from email.policy import SMTP
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
import redis
import redis.asyncio as aioredis
import uvicorn
from fastapi import FastAPI
from playwright.sync_api import Browser, ConsoleMessage, Page, Request, expect

from messageweave import runtime
from messageweave.app import create_app
from messageweave.config.crypto import AAD, decrypt
from messageweave.config.model import BusinessConfig, parse_wire
from messageweave.config.outbound import OutboundConfig
from messageweave.mail.jmap import JmapClient
from messageweave.pipeline.conversation import (
    ConversationContext,
    IncomingMessage,
    reply_to_update,
)
from messageweave.services import Services
from messageweave.settings import Settings
from messageweave.store import keys
from messageweave.store.redis import open_redis
from tests.peers.cyrus import CyrusServer
from tests.peers.fakellm import FakeLlm
from tests.peers.telegram import SentMessage

if TYPE_CHECKING:
    from tests.served import ServedApp  # which builds on these helpers


_Layer = TypeVar("_Layer")

ADMIN_KEY = "ab" * 32
CYRUS_USER = "alice"
CYRUS_PASSWORD = "secret"
WAIT_S = 20.0  # for a worker, Cyrus and the emulator on a busy 2-core machine
DAY = 86_400
RECONCILE_TOKEN = "reconcile-SECRET"
RECONCILE_AUTH = {"Authorization": f"Bearer {RECONCILE_TOKEN}"}
WRONG_BEARER = {"Authorization": "Bearer not-the-token"}
DEBUG_TOKEN = "debug-token-SECRET-at-least-32-chars"  # 32 or more (issue #23)
CONFIG_KEY = bytes.fromhex(ADMIN_KEY)


# ------------------------------------------------------------------------------------------ waiting


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


async def every_entry_finished(redis: aioredis.Redis,
                               streams: tuple[str, ...] = (keys.STREAM_JMAP,)) -> None:
    """Until every entry of `streams` (the `default` account's `stalwart:jmap`) has its
    terminal record: whatever the worker was to send for them is sent, so the chat holds all
    it ever will."""
    left: list[str] = []

    async def finished() -> bool:
        left.clear()
        for stream in streams:
            for entry_id, _ in await redis.xrange(stream):
                if not await redis.exists(keys.delivery_committed(stream, entry_id)):
                    lease = await redis.get(keys.delivery_inflight(stream, entry_id))
                    intent = await redis.hget(keys.delivery_intent(stream, entry_id), "state")
                    left.append(f"{stream}/{entry_id} lease={lease} intent={intent}")
        return not left
    await eventually(finished, lambda: f"every queued mail finished ({len(left)} not: "
                                       f"{left[:3]})")


# -------------------------------------------------------------------- the app and its configuration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def settings_for(redis_url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {"redis_url": redis_url, "admin_key": ADMIN_KEY}
    values.update(overrides)
    return Settings(**values)


def layer_of(asgi: object, kind: type[_Layer]) -> _Layer:
    """The first ASGI layer of `kind` inside `create_app()`'s (each layer's `.app` is the next
    one inward)."""
    while not isinstance(asgi, kind):
        asgi = asgi.app  # type: ignore[attr-defined]
    return asgi


def fastapi_of(asgi: object) -> FastAPI:
    """The FastAPI app inside `create_app()`'s outer ASGI layers (SecurityHeaders,
    RequestContext), e.g. to add a route or run its lifespan."""
    return layer_of(asgi, FastAPI)


@asynccontextmanager
async def running_client(
    settings: Settings, client: tuple[str, int] = ("127.0.0.1", 123), *,
    prepare: Callable[[FastAPI], None] | None = None,
) -> AsyncIterator[httpx.AsyncClient]:
    """The real app (lifespan included) behind an httpx client; `client` is the socket peer
    address the app sees. `prepare` is called with the FastAPI app before its lifespan starts
    (e.g. to hand it a test's clock)."""
    asgi = create_app(settings)
    inner = fastapi_of(asgi)
    if prepare is not None:
        prepare(inner)
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


@asynccontextmanager
async def flushed_redis(url: str) -> AsyncIterator[aioredis.Redis]:
    """A client of the Redis at `url` (any topology: `open_redis`), its database flushed first
    (on a cluster: every primary's)."""
    client = await open_redis(url)
    await client.flushdb()
    try:
        yield client
    finally:
        await client.aclose()


def admin_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_KEY}"}


async def login(client: httpx.AsyncClient) -> dict[str, str]:
    response = await client.post("/api/admin/session", headers=admin_headers())
    assert response.status_code == 200, response.text
    return {"Authorization": f"Bearer {response.json()['session']}"}


def debug_headers(token: str = DEBUG_TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


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


async def save_wire(client: httpx.AsyncClient, admin: dict[str, str],
                    wire: dict[str, Any], *, applied: bool = False) -> None:
    """Save `wire` with the admin session `admin`; with `applied`, the running app must have
    been rebuilt on it (not so when its peers are unreachable on purpose)."""
    saved = await client.put("/api/business-config", headers=admin, json=wire)
    assert saved.status_code == 200, saved.text
    assert not applied or saved.json()["runtime_applied"] is True, saved.text


async def configure(client: httpx.AsyncClient, wire: dict[str, Any],
                    outbound: dict[str, int] | None = None, *,
                    enabled: bool = True, applied: bool = False) -> dict[str, str]:
    """Save `wire` (and `outbound`, `applied` as in `save_wire`) and switch the service on (or,
    with `enabled=False`, off); the admin session's headers."""
    headers = await login(client)
    if outbound is not None:
        r = await client.put("/api/config", headers=headers, json=outbound)
        assert r.status_code == 200, r.text
    await save_wire(client, headers, wire, applied=applied)
    switched = await client.put("/api/enabled", headers=headers, json={"enabled": enabled})
    assert switched.status_code == 200, switched.text
    return headers


async def configured_and_enabled(client: httpx.AsyncClient) -> dict[str, str]:
    session = await login(client)
    assert (await client.put("/api/business-config", json=sample_wire(),
                             headers=session)).status_code == 200
    assert (await client.put("/api/enabled", json={"enabled": True},
                             headers=session)).status_code == 200
    return session


def mailbox_wire(cyrus: CyrusServer, mailbox: FreshUser, **overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "jmap_session_url": cyrus.origin + "/",
        "jmap_username": mailbox.user,
        "jmap_password": mailbox.password,
        # nothing here may reach a real Telegram: the worker's sends fail fast on a closed port
        "telegram_api_base_url": f"http://127.0.0.1:{closed_port()}",
        "reconcile_interval_s": 0,
    }
    values.update(overrides)
    return sample_wire(**values)


def llm_wire(fakellm: FakeLlm | str, model: str = "summarizer") -> dict[str, Any]:
    base = fakellm if isinstance(fakellm, str) else fakellm.base_url
    return {"llm_enabled": True, "llm_allow_net": True, "llm_base_url": base,
            "llm_api_key": "llm-key-SECRET", "llm_model": model}


async def stored_wire(r: aioredis.Redis) -> dict[str, Any]:
    raw = await r.get(keys.BUSINESS_CONFIG)
    assert raw is not None
    result: dict[str, Any] = json.loads(decrypt(CONFIG_KEY, raw, AAD))
    return result


async def snapshot(r: aioredis.Redis) -> tuple[Any, Any]:
    return await r.get(keys.BUSINESS_CONFIG), await r.get(keys.BUSINESS_CONFIG_REVISION)


async def first_save(client: httpx.AsyncClient, **overrides: Any) -> httpx.Response:
    return await client.put("/api/business-config", json=sample_wire(**overrides),
                            headers=await login(client))


# ------------------------------------------------------------------------------------------ answers


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


async def ready_body(client: httpx.AsyncClient) -> dict[str, object]:
    response = await client.get("/ready")
    return dict(response.json()) if response.status_code == 200 else {}


async def until_label(client: httpx.AsyncClient, field: str, label: str,
                      timeout_s: float = WAIT_S) -> None:
    """Until `/ready` reports `field` (`updates`, `push`) as `label` (a prefix). `/ready`
    answers 503 while a peer's probe fails: then use `until_status`."""
    seen: list[object] = []

    async def reported() -> bool:
        response = await client.get("/ready")
        seen[:] = [response.status_code, response.headers.get("x-ready-failed"),
                   response.json()]
        return response.status_code == 200 and str(response.json().get(field, "")).startswith(
            label)
    await eventually(reported, lambda: f"/ready {field} {label}; /ready last answered {seen}",
                     timeout_s)


async def until_status(app: ServedApp, field: str, label: str,
                       timeout_s: float = WAIT_S) -> None:
    """Until the admin page's status (`GET /api/push/status`) reports `field` (`updates`,
    `in_force`) as `label` (a prefix)."""
    seen: list[object] = []

    async def reported() -> bool:
        body = (await app.client.get("/api/push/status", headers=app.admin)).json()
        seen[:] = [body.get(field)]
        return str(body.get(field, "")).startswith(label)
    await eventually(reported, lambda: f"{field} {label}; last seen {seen}", timeout_s)


# ---------------------------------------------------------------------------------------- processes


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


async def run_cli(*args: str, **env: str) -> tuple[int, str]:
    base = {k: v for k, v in os.environ.items()
            if k not in ("REDIS_URL", "CONFIG_ENCRYPTION_KEY", "DEBUG_ENABLED", "DEBUG_TOKEN")}
    proc = await asyncio.create_subprocess_exec(
        console_script("messageweave"), *args, env={**base, "COLUMNS": "200", **env},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


# -------------------------------------------------------------------------------------------- peers


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


@dataclass(frozen=True)
class BotChat:
    """A bot of its own (token) talking to a chat of its own, so tests never share messages."""

    token: str
    chat_id: int


Reply = tuple[int, dict[str, str], bytes]


class TinyServer:
    """A minimal HTTP(S)/1.1 server on 127.0.0.1 for failure modes Cyrus cannot show
    (cross-origin redirects, silence). `reply(method, path)` gives (status, headers, body);
    None means: accept and never answer."""

    def __init__(
        self, reply: Callable[[str, str], Reply | None], tls: ssl.SSLContext | None
    ) -> None:
        self._reply = reply
        self._tls = tls
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self._server: asyncio.Server | None = None
        self._hung: list[asyncio.StreamWriter] = []
        self.port = 0

    @property
    def origin(self) -> str:
        return f"{'https' if self._tls else 'http'}://127.0.0.1:{self.port}"

    async def __aenter__(self) -> TinyServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self._tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for w in self._hung:
            w.close()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            writer.close()
            return
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {
            k.strip().lower(): v.strip()
            for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)
        }
        self.requests.append((method, path, headers))
        reply = self._reply(method, path)
        if reply is None:
            self._hung.append(writer)
            return
        status, extra, body = reply
        out = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}", "Connection: close"]
        out += [f"{k}: {v}" for k, v in extra.items()]
        writer.write(("\r\n".join(out) + "\r\n\r\n").encode() + body)
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.drain()
        writer.close()


# ---------------------------------------------------------------------------- mail and the pipeline


NEWSLETTER = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Newsletter title</title>
<style>body { font-family: sans-serif } .hide { display: none }</style>
<script>document.write("SCRIPTED " + (1 < 2))</script></head>
<body>
<div style="display:none;max-height:0;overflow:hidden">Hidden preheader</div>
<table role="presentation" width="600"><tr><td>
<h1>Order &amp; delivery &#8212; &quot;Spring&quot; edition</h1>
<p>Caf&eacute; cr&egrave;me for &euro;3&nbsp;&lt;today&gt;.</p>
<ul><li>First item</li><li>Second item</li></ul>
<ol><li>Step one</li><li>Step two</li></ol>
<p>Read it <a href="https://tracker.example/c?u=abcdef">on the web</a>.</p>
</td></tr></table>
<script>var tracking = "pixel";</script>
<img src="https://tracker.example/open.gif" width="1" height="1" alt="">
</body></html>
"""


NEWSLETTER_TEXT = (
    'Order & delivery — "Spring" edition\n\n'
    "Café crème for €3 <today>.\n\n"
    "* First item\n* Second item\n1. Step one\n2. Step two\n\n"
    "Read it on the web."
)


def html_message(html: str, subject: str = "Newsletter", *, charset: str = "utf-8",
                 attachment: bytes | None = None) -> bytes:
    """A mail whose only body is `html` (text/html, no text/plain alternative)."""
    msg = EmailMessage(policy=SMTP)
    msg["From"] = "News <news@example.org>"
    msg["To"] = "alice@localhost"
    msg["Subject"] = subject
    msg["Date"] = email.utils.formatdate()
    msg["Message-ID"] = email.utils.make_msgid(domain="example.org")
    msg.set_content(html, subtype="html", charset=charset)
    if attachment is not None:
        msg.add_attachment(attachment, maintype="text", subtype="plain", filename="notes.txt")
    return msg.as_bytes()


async def enqueued(redis: aioredis.Redis) -> list[str]:
    """The email ids in `stalwart:jmap`, oldest first (entries must hold exactly the contract's
    two fields)."""
    ids = []
    for _entry_id, fields in await redis.xrange(keys.STREAM_JMAP):
        assert set(fields) == {"account_id", "email_id"}, fields
        ids.append(fields["email_id"])
    return ids


async def wait_enqueued(redis: aioredis.Redis, email_id: str, within_s: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < within_s:
        if email_id in await enqueued(redis):
            return time.monotonic() - started
        await asyncio.sleep(0.02)
    raise AssertionError(f"{email_id} not enqueued within {within_s} s")


def state_change(account: str, types: dict[str, str] | None = None) -> dict[str, Any]:
    return {"@type": "StateChange", "changed": {account: types or {"Email": "s2"}}}


async def enqueue_mails(redis: aioredis.Redis, cyrus: CyrusServer, prefix: str,
                        count: int, *, user: str = CYRUS_USER,
                        account: str = keys.DEFAULT_ACCOUNT) -> dict[str, str]:
    """Append `count` mails to Cyrus `user`'s INBOX and queue them in `account`'s stream;
    subject → stream entry id."""
    subjects = [f"{prefix} {n:03d}" for n in range(count)]
    names = keys.AccountKeys(account)
    by_subject = {}
    for subject, mail in zip(subjects, cyrus.append_many(subjects, user=user), strict=True):
        # The reconcile's own enqueue (dedup claim + XADD): a pass the app runs by itself
        # (at start, a catch-up) must not queue these a second time.
        by_subject[subject] = str(await enqueue_mail(redis, user, mail.email_id, names))
    return by_subject


def subject_of(text: str) -> str:
    """The subject line of a three-line notification."""
    return text.split("\n")[1].removeprefix("Subject: ")


@asynccontextmanager
async def worker_services(redis_url: str) -> AsyncIterator[Services]:
    """The stored configuration loaded into services of our own, wired like `messageweave
    drain`, for tests that drive a `Worker` directly."""
    async with runtime.running(settings_for(redis_url)) as svc:
        assert svc.runtime is not None
        yield svc


class LaneTurn(asyncio.Future[None]):
    """A turn in a chat lane that tells when an attempt has started waiting for it."""

    def __init__(self) -> None:
        super().__init__()
        self.waited_for = asyncio.Event()

    def add_done_callback(self, fn: Callable[[Any], object], *,
                          context: Any = None) -> None:
        self.waited_for.set()
        super().add_done_callback(fn, context=context)


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

        ctx = ConversationContext(self.redis, keys.DEFAULT, self.config, self.outbound, mail=jmap,
                                  now=self.now)
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


def keyboard(message: SentMessage) -> list[tuple[str, str]]:
    """The (text, callback_data) of the message's buttons, as Telegram shows them now."""
    markup: dict[str, Any] = message.params.get("reply_markup") or {}
    return [(b["text"], b["callback_data"]) for row in markup.get("inline_keyboard", [])
            for b in row]


async def press(served: ServedApp, message: SentMessage, data: str,
                from_id: int | None = None) -> dict[str, Any]:
    """Press a button under `message` (as the user `from_id`, default the chat's); the bot's
    answer to that press (answerCallbackQuery)."""
    return await press_in(served, message.chat_id, message.message_id, data, from_id)


async def press_in(served: ServedApp, chat_id: int, message_id: int | None, data: str,
                   from_id: int | None = None) -> dict[str, Any]:
    """`press` by the chat and message id (None: a press whose message the test has not
    kept)."""
    pressed = await served.emulator.press_button(served.token, chat_id, message_id, data,
                                                 from_id=from_id)
    assert pressed.status == 204, pressed
    mine: list[dict[str, Any]] = []

    async def answered() -> bool:
        mine[:] = [a for a in await served.emulator.callback_answers(served.token)
                   if a["callback_query_id"] == pressed.callback_id]
        return bool(mine)
    await eventually(answered, "the answer to the press", WAIT_S)
    return mine[0]


# --------------------------------------------------------------------------------------------- time


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


# ---------------------------------------------------------------------- the admin page in a browser


# Collects `securitypolicyviolation` events before any page script runs (init scripts are
# injected by the browser itself, so the page's CSP does not apply to this one).
_CSP_PROBE = """
window.__cspViolations = [];
document.addEventListener('securitypolicyviolation', function (e) {
  window.__cspViolations.push(e.violatedDirective + ' ' + e.blockedURI);
});
"""


class LiveService:
    """The real ASGI app under uvicorn in a background thread (its own event loop)."""

    def __init__(self, settings: Settings) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=self.port,
                                log_config=None, log_level="warning", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="uvicorn", daemon=True)

    def start(self) -> LiveService:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the service did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)


def save_configuration(service: LiveService, wire: dict[str, Any]) -> None:
    """Store a configuration the way another admin would (its own session, over HTTP)."""
    with httpx.Client(base_url=service.base_url) as http:
        token = http.post("/api/admin/session", headers=admin_headers()).json()["session"]
        response = http.put("/api/business-config", json=wire,
                            headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 200, response.text


@dataclass
class PageRun:
    page: Page
    console: list[str] = field(default_factory=list)


def open_browser_page(browser: Browser, locale: str, **options: Any) -> Iterator[PageRun]:
    context = browser.new_context(locale=locale, **options)
    context.add_init_script(_CSP_PROBE)
    page = context.new_page()
    run = PageRun(page)

    def on_console(message: ConsoleMessage) -> None:
        run.console.append(f"{message.type}: {message.text}")

    page.on("console", on_console)
    yield run
    violations = page.evaluate("window.__cspViolations || []") if not page.is_closed() else []
    context.close()
    csp_console = [line for line in run.console
                   if "Content Security Policy" in line or "Refused to" in line]
    assert violations == [] and csp_console == [], (violations, csp_console)


BIZ = "/api/business-config"


def open_page(page: Page, service: LiveService) -> None:
    page.goto(service.base_url + "/")
    expect(page.locator("#setup-summary")).not_to_have_text(re.compile("Checking|正在检查"))


def sign_in(page: Page, key: str = ADMIN_KEY) -> None:
    page.fill("#auth-key", key)
    page.click("#auth-submit")
    expect(page.locator("#admin")).to_be_visible()


def signed_in(page: Page, service: LiveService, revision: int | None = None) -> None:
    open_page(page, service)
    sign_in(page)
    state = page.locator("#biz-state")
    if revision is None:
        expect(state).to_contain_text("Nothing saved yet")
    else:
        expect(state).to_contain_text(f"revision {revision}")


def is_put(request: Request) -> bool:
    return request.method == "PUT" and request.url.endswith(BIZ)


def session_put(service: LiveService, session: str, patch: dict[str, Any]) -> httpx.Response:
    """A write from another tool with the page's own admin session (only a session may write,
    and a second login would end the page's)."""
    return httpx.put(service.base_url + BIZ, json=patch,
                     headers={"Authorization": f"Bearer {session}"})


class BrowserMail:
    """A fresh Cyrus user, configured as the service's mailbox and switched on."""

    def __init__(self, service: LiveService, cyrus: CyrusServer, redis_sync: redis.Redis,
                 **overrides: Any) -> None:
        self.service, self.cyrus, self.redis = service, cyrus, redis_sync
        self.user = f"card{random.randrange(10**9)}"
        self.password = f"pw-{self.user}"
        cyrus.add_user(self.user, self.password)
        values: dict[str, Any] = {
            "jmap_session_url": cyrus.origin + "/", "jmap_username": self.user,
            "jmap_password": self.password, "reconcile_interval_s": 0, "audit_interval_s": 0,
            "telegram_api_base_url": f"http://127.0.0.1:{closed_port()}",
        }
        values.update(overrides)
        save_configuration(service, sample_wire(**values))
        with httpx.Client(base_url=service.base_url) as http:
            token = http.post("/api/admin/session", headers=admin_headers()).json()["session"]
            on = http.put("/api/enabled", json={"enabled": True},
                          headers={"Authorization": f"Bearer {token}"})
            assert on.status_code == 200, on.text

    def first_run(self) -> None:
        answer = httpx.post(self.service.base_url + "/reconcile", headers=RECONCILE_AUTH)
        assert answer.status_code == 204, answer.text
        # receivedAt has a 1 s resolution: mail of the first run's own second is not audited
        baseline = self.redis.get(keys.RECONCILE_BASELINE)
        assert isinstance(baseline, str)
        self.redis.set(keys.RECONCILE_BASELINE, int(baseline) - 2)

    def lose(self, subject: str) -> str:
        """Append a mail and move the reconcile cursor past it, so discovery never sees it."""
        email_id = self.cyrus.append(user=self.user, subject=subject).email_id

        async def state() -> str:
            async with JmapClient(self.cyrus.session_url, self.user, self.password,
                                  ca_file=self.cyrus.ca_file, timeout=10) as client:
                return await client.email_state()

        # the sync Playwright API keeps an event loop running in this thread
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            self.redis.set(keys.RECONCILE_CURSOR, pool.submit(asyncio.run, state()).result(30))
        return email_id


# --- what src/ offers only through its real paths (issue #24: no test-only code in src/) ----

async def enqueue_mail(redis: aioredis.Redis, account_id: str, email_id: str,
                       names: keys.AccountKeys = keys.DEFAULT) -> str | None:
    """Enqueue one mail the reconcile's way (`store.mail_entries.enqueue_new_mails`), in the
    account of `names`: the new entry's id (its claim holds it), or None when the mail was
    claimed already."""
    from messageweave.store.mail_entries import enqueue_new_mails

    if not await enqueue_new_mails(redis, account_id, [email_id], names=names):
        return None
    entry: str | None = await redis.get(names.dedup_jmap(account_id, email_id))
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


async def all_keys(redis: aioredis.Redis, pattern: str = "*") -> list[str]:
    """Every key matching `pattern`, sorted: SCAN, which a cluster client runs on every primary
    (KEYS goes to one node of a cluster only)."""
    return sorted([key async for key in redis.scan_iter(match=pattern, count=1000)])


async def redis_text(redis: aioredis.Redis) -> str:
    """Every key of `redis` with its values (strings, hashes, lists, sets, sorted sets,
    streams) as one text, for a test that proves something is stored nowhere (issue #25)."""
    dumped = []
    for key in await all_keys(redis):
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
