"""PushSubscription/set (RFC 8620 §7.2): create, verify, destroy.

Cyrus 3.6 does not implement PushSubscription at all (it answers `unknownMethod`; the first test
pins that down against the real server). The create/verify/destroy paths are therefore tested
against a tiny RFC-shaped responder, an httpx MockTransport that serves a session resource and
answers ONLY PushSubscription/set, the way RFC 8620 §7.2 describes it.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from messageweave.mail.jmap import (
    CORE,
    JmapClient,
    JmapSetError,
    UnknownMethod,
)


async def test_cyrus_does_not_implement_push_subscriptions(client: JmapClient) -> None:
    with pytest.raises(UnknownMethod) as caught:
        await client.push_subscription_create("dev-1", "https://example.org/push", ["Email"])
    assert caught.value.method == "PushSubscription/set"


class PushResponder:
    """RFC 8620 §7.2 PushSubscription/set, nothing else (other methods: unknownMethod)."""

    def __init__(self) -> None:
        self.subscriptions: dict[str, dict[str, Any]] = {}
        self.bodies: list[dict[str, Any]] = []
        self.codes: dict[str, str] = {}

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
        out = []
        for name, args, call_id in body["methodCalls"]:
            if name != "PushSubscription/set":
                out.append(["error", {"type": "unknownMethod"}, call_id])
                continue
            out.append([name, self._set(args), call_id])
        return httpx.Response(200, json={"methodResponses": out, "sessionState": "s1"})

    def _set(self, args: dict[str, Any]) -> dict[str, Any]:
        res: dict[str, Any] = {
            "created": None, "updated": None, "destroyed": None,
            "notCreated": None, "notUpdated": None, "notDestroyed": None,
        }  # fmt: skip
        for key, sub in (args.get("create") or {}).items():
            if not sub.get("url", "").startswith("https://"):
                res["notCreated"] = {key: {"type": "invalidProperties", "properties": ["url"]}}
                continue
            sub_id = f"P{len(self.subscriptions) + 1}"
            self.subscriptions[sub_id] = {**sub, "verificationCode": None}
            self.codes[sub_id] = f"code-{sub_id}"  # sent to sub["url"] as PushVerification
            res["created"] = {key: {"id": sub_id, "expires": "2030-01-01T00:00:00Z"}}
        for sub_id, patch in (args.get("update") or {}).items():
            if sub_id in self.subscriptions and patch.get("verificationCode") == self.codes[sub_id]:
                self.subscriptions[sub_id]["verificationCode"] = patch["verificationCode"]
                res["updated"] = {sub_id: None}
            else:
                res["notUpdated"] = {sub_id: {"type": "invalidProperties",
                                              "properties": ["verificationCode"]}}  # fmt: skip
        for sub_id in args.get("destroy") or []:
            if self.subscriptions.pop(sub_id, None) is not None:
                res["destroyed"] = [sub_id]
            else:
                res["notDestroyed"] = {sub_id: {"type": "notFound"}}
        return res


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
    sub = await client.push_subscription_create(
        "device-1", "https://bot.example.org/jmap-push", ["Email", "Mailbox"]
    )
    assert sub.id == "P1" and sub.expires == "2030-01-01T00:00:00Z"

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
