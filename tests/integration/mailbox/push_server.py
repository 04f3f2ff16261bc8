"""A tiny RFC-shaped JMAP responder over real HTTPS, for PushSubscription/get and /set ONLY.

Cyrus 3.6 does not implement PushSubscription (tests/integration/jmap/test_push.py pins that
down), so the push register/disable/verify/lifecycle paths of the app talk to this server
instead: it serves a session resource and answers PushSubscription/get and /set as RFC 8620 §7.2
describes (the logic is `PushResponder` of the client tests: it answers the way the RFC says a
server may, not the way our code expects, e.g. it may shorten `expires`, destroys a
subscription at its expiry by an injected clock, and can lose everything on `restart()`);
every other method is `unknownMethod`. Everything else on the mailbox side is tested against
Cyrus.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ssl
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
import redis.asyncio as aioredis

from messageweave.store import keys
from messageweave.store.push import Registration, record_registration
from tests.integration.jmap.test_push import PushResponder
from tests.peers.cyrus import CyrusServer

TEST_CALLBACK = "https://bot.example.org/push/jmap"
TEST_TOKEN = "token-of-a-test-registration-0123456789abc"


async def record_test_registration(
    redis: aioredis.Redis, sub_id: str = "P-test", *, url: str = TEST_CALLBACK,
    token: str = TEST_TOKEN, verified: bool = True,
) -> str:
    """The registration a real server would have accepted, recorded directly (Cyrus has no
    PushSubscription/set): its callback token's digest in the lifecycle and, with
    `verified`, its PushVerification completed. Returns the path and query to post pushes to
    (`/push/jmap?t=<token>`, issue #23)."""
    digest = hashlib.sha256(url.encode()).hexdigest()
    await record_registration(redis, Registration(digest, sub_id), url=url, now=time.time(),
                              token_digest=hashlib.sha256(token.encode()).hexdigest())
    if verified:
        await redis.hset(keys.PUSH_LIFECYCLE, "verified", str(int(time.time())))
    return f"/push/jmap?t={token}"


def callback_path(url: str) -> str:
    """The path and query of a subscription's callback URL (what the JMAP server posts to)."""
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}" if parts.query else parts.path


class RefusingResponder(PushResponder):
    """PushResponder that can refuse destroys (the server keeps the subscription), refuse
    creates (`forbidden`, e.g. a quota), be down altogether (every API call answers 503), or
    refuse the credentials (`refuse_auth`: every request, the session's included, is 401, as
    for a wrong stored password)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.refuse_destroy = False
        self.refuse_creates = False
        self.down = False
        self.refuse_auth = False

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if self.refuse_auth:
            return httpx.Response(401, headers={"WWW-Authenticate": 'Basic realm="jmap"'})
        if self.down and request.method == "POST":
            return httpx.Response(503, json={"type": "urn:ietf:params:jmap:error:unavailable"})
        return super().__call__(request)

    def refuse_create(self, sub: dict[str, Any]) -> dict[str, Any] | None:
        if self.refuse_creates:
            return {"type": "forbidden", "description": "too many subscriptions"}
        return super().refuse_create(sub)

    def _set(self, args: dict[str, Any]) -> dict[str, Any]:
        if self.refuse_destroy and args.get("destroy"):
            return {"destroyed": None, "notDestroyed": {
                sub_id: {"type": "forbidden"} for sub_id in args["destroy"]}}
        return super()._set(args)


class PushServer:
    """`RefusingResponder` over HTTPS on a loopback port, with Cyrus's test certificate (so
    clients trust it like Cyrus). `options` go to the responder (`clock`, `max_lifetime_s`)."""

    def __init__(self, cyrus: CyrusServer, **options: Any) -> None:
        self.responder = RefusingResponder(**options)
        self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._tls.load_cert_chain(cyrus.server_cert, cyrus.server_key)
        self._server: asyncio.Server | None = None
        self.port = 0
        self.connections = 0  # TCP connections accepted (each a TLS handshake)
        self.requests = 0  # HTTP requests answered, the session's included

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}/"

    async def __aenter__(self) -> PushServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self._tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.requests += 1
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = dict(
                    (k.strip().lower(), v.strip())
                    for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)
                )
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                reply = self.responder(httpx.Request(method, f"{self.url[:-1]}{path}",
                                                     content=body))
                content = reply.content
                writer.write(
                    f"HTTP/1.1 {reply.status_code} X\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(content)}\r\n\r\n".encode() + content
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()
