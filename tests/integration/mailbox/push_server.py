"""A tiny RFC-shaped JMAP responder over real HTTPS, for PushSubscription/get and /set ONLY.

Cyrus 3.6 does not implement PushSubscription (tests/integration/jmap/test_push.py pins that
down), so the push register/disable/verify/lifecycle paths of the app talk to this server
instead: it serves a session resource and answers PushSubscription/get and /set as RFC 8620 §7.2
describes (the logic is `PushResponder`, which the client tests drive directly: it answers the
way the RFC says a server may, not the way our code expects, e.g. it may shorten `expires`,
destroys a subscription at its expiry by an injected clock, and can lose everything on
`restart()`);
every other method is `unknownMethod`. Everything else on the mailbox side is tested against
Cyrus.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import ssl
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx
import redis.asyncio as aioredis

from messageweave.mail.jmap import CORE
from messageweave.store import keys
from messageweave.store.push import Registration, record_registration
from tests.helpers import DAY, unix_of, utc_date
from tests.peers.cyrus import CyrusServer


class PushResponder:
    """RFC 8620 §7.2 PushSubscription/get and /set, nothing else (other methods:
    `unknownMethod`). It answers the way the RFC says a server may, NOT the way MessageWeave
    happens to call it; where the RFC leaves the server a choice, the choice is a setting:

    - `expires` (§7.2): a server MAY shorten the expiry a client asks for and MAY set one when
      none is given. Here anything later than `max_lifetime_s` from now is clamped to it, and a
      create without `expires` gets exactly that. A changed value is returned in `created` /
      `updated` (§5.3: `updated[id]` is null when the server changed nothing beyond the patch).
      An expiry in the past is refused (`invalidProperties`).
    - expiry: the server MUST NOT push after `expires` and MAY destroy the subscription then;
      this one destroys it as soon as `clock()` (injected, Unix seconds) reaches `expires`.
    - `restart()` forgets every subscription, like a server that lost its state; ids are never
      reused (a new create after a restart gets a new id).
    - /get (§7.2.1): no accountId, no state; `ids` null = all; `url` and `keys` are never
      returned and asking for them is `forbidden`; unknown ids are listed in `notFound`.
    - /set (§7.2.2): no accountId; `url` must be https; `verificationCode` may not be set on
      create and must equal the code sent to the URL on update; `url`/`keys` are immutable.
    """

    def __init__(
        self, *, clock: Callable[[], float] = time.time, max_lifetime_s: int = 30 * DAY
    ) -> None:
        self.subscriptions: dict[str, dict[str, Any]] = {}
        self.bodies: list[dict[str, Any]] = []
        self.codes: dict[str, str] = {}
        self.clock = clock
        self.max_lifetime_s = max_lifetime_s
        self._next_id = 1

    def restart(self) -> None:
        """The server lost every subscription (its codes too)."""
        self.subscriptions.clear()
        self.codes.clear()

    def methods(self) -> list[str]:
        return [call[0] for body in self.bodies for call in body["methodCalls"]]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(
                200,
                json={
                    "capabilities": {CORE: {"maxObjectsInGet": 100, "maxCallsInRequest": 8}},
                    "accounts": {"u1": {"name": "alice@example.org"}},
                    "primaryAccounts": {"urn:ietf:params:jmap:mail": "u1"},
                    "username": "alice@example.org",
                    "apiUrl": "/api/",
                    "downloadUrl": "/download/{accountId}/{blobId}/{name}?accept={type}",
                    "uploadUrl": "/upload/{accountId}/",
                    "eventSourceUrl": "/events/",
                    "state": "s1",
                },
            )
        body = json.loads(request.content)
        self.bodies.append(body)
        self._expire()
        out = []
        for name, args, call_id in body["methodCalls"]:
            handler = {"PushSubscription/set": self._set,
                       "PushSubscription/get": self._get}.get(name)
            if handler is None:
                out.append(["error", {"type": "unknownMethod"}, call_id])
                continue
            if "accountId" in args:  # session-level methods take no accountId
                out.append(["error", {"type": "invalidArguments"}, call_id])
                continue
            result = handler(args)
            out.append(["error", result["error"], call_id] if "error" in result
                       else [name, result, call_id])
        return httpx.Response(200, json={"methodResponses": out, "sessionState": "s1"})

    # -------------------------------------------------------------------- behaviour

    def _expire(self) -> None:
        now = self.clock()
        for sub_id, sub in list(self.subscriptions.items()):
            if sub["expires"] is not None and unix_of(sub["expires"]) <= now:
                del self.subscriptions[sub_id]

    def _granted(self, asked: Any) -> tuple[str | None, bool]:
        """(the expiry in force, whether it differs from what was asked); None = refused."""
        limit = int(self.clock()) + self.max_lifetime_s
        if asked is None:
            return utc_date(limit), True
        if not isinstance(asked, str):
            return None, False
        try:
            wanted = unix_of(asked)
        except ValueError:
            return None, False
        if wanted <= self.clock():
            return None, False
        return (utc_date(limit), True) if wanted > limit else (utc_date(wanted), False)

    def _get(self, args: dict[str, Any]) -> dict[str, Any]:
        props = args.get("properties")
        if isinstance(props, list) and {"url", "keys"} & set(props):
            return {"error": {"type": "forbidden"}}
        wanted = ["id", "deviceClientId", "verificationCode", "expires", "types"]
        if isinstance(props, list):
            wanted = ["id", *[p for p in wanted if p in props and p != "id"]]
        ids = args.get("ids")
        ids = list(self.subscriptions) if ids is None else ids
        found = [{p: ({"id": i} | self.subscriptions[i]).get(p) for p in wanted}
                 for i in ids if i in self.subscriptions]
        return {"list": found, "notFound": [i for i in ids if i not in self.subscriptions]}

    def _set(self, args: dict[str, Any]) -> dict[str, Any]:
        res: dict[str, Any] = {
            "created": None, "updated": None, "destroyed": None,
            "notCreated": None, "notUpdated": None, "notDestroyed": None,
        }  # fmt: skip

        def put(key: str, object_id: str, value: Any) -> None:
            res[key] = {**(res[key] or {}), object_id: value}

        for key, sub in (args.get("create") or {}).items():
            refusal = self.refuse_create(sub)
            if refusal is not None:
                put("notCreated", key, refusal)
                continue
            expires, changed = self._granted(sub.get("expires"))
            if expires is None:
                put("notCreated", key, {"type": "invalidProperties", "properties": ["expires"]})
                continue
            sub_id = f"P{self._next_id}"
            self._next_id += 1
            self.subscriptions[sub_id] = {**sub, "verificationCode": None, "expires": expires,
                                          "types": sub.get("types")}
            self.codes[sub_id] = f"code-{sub_id}"  # sent to sub["url"] as PushVerification
            put("created", key, {"id": sub_id, **({"expires": expires} if changed else {})})
        for sub_id, patch in (args.get("update") or {}).items():
            result = self._update(sub_id, patch)
            put("updated" if "type" not in (result or {}) else "notUpdated", sub_id, result)
        for sub_id in args.get("destroy") or []:
            if self.subscriptions.pop(sub_id, None) is not None:
                res["destroyed"] = [*(res["destroyed"] or []), sub_id]
            else:
                put("notDestroyed", sub_id, {"type": "notFound"})
        return res

    def refuse_create(self, sub: dict[str, Any]) -> dict[str, Any] | None:
        """A SetError for a create this server will not do (None = it will)."""
        if not str(sub.get("url", "")).startswith("https://"):
            return {"type": "invalidProperties", "properties": ["url"]}
        if "verificationCode" in sub:
            return {"type": "invalidProperties", "properties": ["verificationCode"]}
        return None

    def _update(self, sub_id: str, patch: dict[str, Any]) -> dict[str, Any] | None:
        """The `updated` value (None or the changed properties), or a SetError (has `type`)."""
        sub = self.subscriptions.get(sub_id)
        if sub is None:
            return {"type": "notFound"}
        immutable = [p for p in patch if p not in ("verificationCode", "expires", "types")]
        if immutable:
            return {"type": "invalidProperties", "properties": immutable}
        if "verificationCode" in patch and patch["verificationCode"] != self.codes.get(sub_id):
            return {"type": "invalidProperties", "properties": ["verificationCode"]}
        changed: dict[str, Any] = {}
        if "expires" in patch:
            expires, clamped = self._granted(patch["expires"])
            if expires is None:
                return {"type": "invalidProperties", "properties": ["expires"]}
            sub["expires"] = expires
            if clamped:
                changed["expires"] = expires
        if "verificationCode" in patch:
            sub["verificationCode"] = patch["verificationCode"]
        if "types" in patch:
            sub["types"] = patch["types"]
        return changed or None


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


async def register_for_test(redis: aioredis.Redis) -> str:
    """Cyrus has no PushSubscription/set: the registration a real server would have accepted
    (verified, with its callback token) is recorded directly (register itself is tested
    against the RFC responder). The path and query to post pushes to.

    The maintenance slot is taken first, for the hour: a running app's lifecycle pass would ask
    Cyrus for this subscription (PushSubscription/get: unknownMethod), mark push degraded and
    run a backup pass of its own, which claims the pushed mail as `reconcile` before the
    push's catch-up (a clean-clone CI run counted the push's mail under the wrong source)."""
    await redis.set(keys.PUSH_MAINTENANCE_SCHEDULE, "taken by register_for_test", ex=3600)
    return await record_test_registration(redis)


PUSH = f"/push/jmap?t={TEST_TOKEN}"  # where register_for_test's subscription is pushed to
