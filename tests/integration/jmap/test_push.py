"""PushSubscription/get and /set (RFC 8620 §7.2): create, verify, extend, destroy.

Cyrus 3.6 does not implement PushSubscription at all (it answers `unknownMethod`; the first test
pins that down against the real server). These paths are therefore tested against a small
RFC-shaped responder, `PushResponder`, served here through an httpx MockTransport and by
tests/integration/mailbox/push_server.py over real HTTPS.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from messageweave.mail.jmap import (
    CORE,
    JmapClient,
    JmapMethodError,
    JmapSetError,
    UnknownMethod,
)

DAY = 86_400


async def test_cyrus_does_not_implement_push_subscriptions(client: JmapClient) -> None:
    with pytest.raises(UnknownMethod) as caught:
        await client.push_subscription_create("dev-1", "https://example.org/push", ["Email"])
    assert caught.value.method == "PushSubscription/set"


def utc_date(unix_s: float) -> str:
    return datetime.fromtimestamp(int(unix_s), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def unix_of(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp())


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


class FakeClock:
    """Unix seconds that move only when a test says so."""

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else start

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def push() -> Any:
    responder = PushResponder()
    client = JmapClient(
        "https://jmap.example.org/", "alice", "pw", transport=httpx.MockTransport(responder)
    )
    async with client:
        yield client, responder


async def test_push_subscription_create_verify_destroy(push: Any) -> None:
    client, responder = push
    asked = utc_date(time.time() + 7 * DAY)
    sub = await client.push_subscription_create(
        "device-1", "https://bot.example.org/jmap-push", ["Email", "Mailbox"], expires=asked
    )
    assert sub.id == "P1" and sub.expires == asked  # within the server's limit: as asked

    # session-level method: only the core capability, no accountId anywhere
    first = responder.bodies[0]
    assert first["using"] == [CORE]
    [(name, args, _call_id)] = first["methodCalls"]
    assert name == "PushSubscription/set" and "accountId" not in args
    [created] = args["create"].values()
    assert created == {
        "deviceClientId": "device-1",
        "url": "https://bot.example.org/jmap-push",
        "types": ["Email", "Mailbox"],
        "expires": asked,
    }

    await client.push_subscription_verify(sub.id, responder.codes[sub.id])
    assert responder.subscriptions[sub.id]["verificationCode"] == "code-P1"

    await client.push_subscription_destroy(sub.id)
    assert responder.subscriptions == {}


async def test_push_subscription_refusals_are_set_errors(push: Any) -> None:
    client, _responder = push
    with pytest.raises(JmapSetError) as caught:
        await client.push_subscription_create("device-1", "http://insecure.example.org/")
    assert caught.value.type == "invalidProperties"
    assert caught.value.properties == ["url"]

    sub = await client.push_subscription_create("device-1", "https://ok.example.org/")
    with pytest.raises(JmapSetError, match="could not update") as wrong:
        await client.push_subscription_verify(sub.id, "wrong-code")
    assert wrong.value.properties == ["verificationCode"]

    with pytest.raises(JmapSetError) as missing:
        await client.push_subscription_destroy("P404")
    assert missing.value.type == "notFound"


async def test_a_shortened_expiry_is_what_create_and_update_answer() -> None:
    """Bug caught: trusting the `expires` we asked for when the server granted less (RFC 8620
    §7.2 lets it), so renewal would come after the subscription is already gone."""
    clock = FakeClock()
    responder = PushResponder(clock=clock, max_lifetime_s=2 * DAY)
    async with JmapClient("https://jmap.example.org/", "alice", "pw",
                          transport=httpx.MockTransport(responder)) as client:
        sub = await client.push_subscription_create(
            "device-1", "https://ok.example.org/", expires=utc_date(clock.now + 7 * DAY))
        assert sub.expires == utc_date(clock.now + 2 * DAY)
        clock.now += DAY
        granted = await client.push_subscription_set_expires(
            sub.id, utc_date(clock.now + 7 * DAY))
        assert granted == utc_date(clock.now + 2 * DAY)
        # within the limit the server keeps what was asked and says nothing more (updated: null)
        asked = utc_date(clock.now + DAY)
        assert await client.push_subscription_set_expires(sub.id, asked) == asked
        assert responder.subscriptions[sub.id]["expires"] == asked


async def test_get_reports_expiry_and_lost_subscriptions() -> None:
    """Bug caught: a subscription the server lost (restart) or expired looking alive because
    nothing asked the server; PushSubscription/get lists it under `notFound`."""
    clock = FakeClock()
    responder = PushResponder(clock=clock)
    async with JmapClient("https://jmap.example.org/", "alice", "pw",
                          transport=httpx.MockTransport(responder)) as client:
        a = await client.push_subscription_create(
            "device-1", "https://ok.example.org/", expires=utc_date(clock.now + DAY))
        b = await client.push_subscription_create(
            "device-1", "https://ok.example.org/", expires=utc_date(clock.now + 3 * DAY))
        lookup = await client.push_subscription_get([a.id, b.id, "P404"])
        assert lookup.found[a.id].expires == a.expires and lookup.not_found == ["P404"]
        [(_name, args, _id)] = responder.bodies[-1]["methodCalls"]
        assert "accountId" not in args and not {"url", "keys"} & set(args["properties"])

        clock.now += 2 * DAY  # a's expiry passed: the server destroyed it
        lookup = await client.push_subscription_get([a.id, b.id])
        assert list(lookup.found) == [b.id] and lookup.not_found == [a.id]

        responder.restart()
        assert (await client.push_subscription_get([b.id])).not_found == [b.id]
        with pytest.raises(JmapSetError) as gone:
            await client.push_subscription_set_expires(b.id, utc_date(clock.now + DAY))
        assert gone.value.type == "notFound"
        again = await client.push_subscription_create("device-1", "https://ok.example.org/")
        assert again.id not in (a.id, b.id)  # ids are never reused


async def test_the_responder_refuses_what_the_rfc_forbids(push: Any) -> None:
    """Keeps the responder honest: url/keys are never readable, a past expiry is refused."""
    client, _responder = push
    responses = await client.call(
        [("PushSubscription/get", {"ids": None, "properties": ["url"]}, "0")], using=(CORE,))
    error = responses.error("0")
    assert isinstance(error, JmapMethodError) and error.type == "forbidden"
    sub = await client.push_subscription_create("device-1", "https://ok.example.org/")
    with pytest.raises(JmapSetError) as past:
        await client.push_subscription_set_expires(sub.id, utc_date(time.time() - 60))
    assert past.value.properties == ["expires"]
