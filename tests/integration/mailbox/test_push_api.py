"""Push registration, verification, disable and orphan handling through the real app.

Cyrus has no PushSubscription/set, so the JMAP server here is the tiny RFC-shaped responder of
push_server.py (real HTTPS, PushSubscription/set only); Redis is real.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.store import keys
from messageweave.store.config_store import sha256_hex
from tests.helpers import assert_envelope, eventually, unix_of
from tests.integration.mailbox.push_server import PushServer, callback_path

CALLBACK = "https://bot.example.org/push/jmap"
OTHER = "https://bot2.example.org/push/jmap"


async def register(client: httpx.AsyncClient, admin: dict[str, str], url: str) -> httpx.Response:
    return await client.post("/api/push/register", headers=admin, json={"callback_url": url})


async def enable(client: httpx.AsyncClient, admin: dict[str, str]) -> None:
    await client.put("/api/enabled", headers=admin, json={"enabled": True})


async def test_register_creates_an_email_subscription_and_is_idempotent(
    client: httpx.AsyncClient, admin: dict[str, str], server: PushServer,
    redis_client: aioredis.Redis,
) -> None:
    first = await register(client, admin, CALLBACK)
    assert first.status_code == 200 and first.json() == {"push_subscription_id": "P1"}
    sub = server.responder.subscriptions["P1"]
    assert sub["url"].startswith(CALLBACK + "?t=") and sub["types"] == ["Email"]
    assert sub["deviceClientId"] == "message-weave-u1"
    digest = sha256_hex(CALLBACK)
    assert await redis_client.get(keys.push_registration(digest)) == "P1"
    assert await redis_client.get(keys.push_subscription_status("P1")) == "pending"
    assert await redis_client.get(keys.PUSH_SUBSCRIPTION_ID) == "P1"
    # the registration is the operator's intent: no EX (issue #11: it used to lapse after 7 d)
    for key in (keys.PUSH_REGISTRATION_CURRENT, keys.push_registration(digest),
                keys.PUSH_LIFECYCLE):
        assert await redis_client.ttl(key) == -1, key
    # an explicit expiry was asked for and the granted one is kept, with the URL to re-create
    asked = server.responder.bodies[-1]["methodCalls"][0][1]["create"]["sub"]["expires"]
    assert abs(unix_of(asked) - (time.time() + keys.PUSH_SUBSCRIPTION_LIFETIME_S)) < 10
    lifecycle = await redis_client.hgetall(keys.PUSH_LIFECYCLE)
    assert lifecycle["id"] == "P1" and lifecycle["url"] == CALLBACK
    assert int(lifecycle["expires"]) == unix_of(sub["expires"])
    assert "verified" not in lifecycle and "failure" not in lifecycle
    assert await redis_client.get(keys.push_register_lock(digest)) is None

    again = await register(client, admin, CALLBACK)
    assert again.json() == {"push_subscription_id": "P1", "idempotent": True}
    assert list(server.responder.subscriptions) == ["P1"]


@pytest.mark.parametrize("body", [
    {"callback_url": "http://bot.example.org/push"},
    {"callback_url": "https://user:pw@bot.example.org/push"},
    {"callback_url": "not a url"}, {"callback_url": 5}, {}, [],
])
async def test_register_refuses_bad_callback_urls(
    client: httpx.AsyncClient, admin: dict[str, str], server: PushServer, body: Any
) -> None:
    response = await client.post("/api/push/register", headers=admin, json=body)
    assert_envelope(response, 400, "invalid_request")
    assert server.responder.subscriptions == {}


async def test_register_and_disable_need_config_authorization(
    client: httpx.AsyncClient, admin: dict[str, str],
) -> None:
    for path in ("/api/push/register", "/api/push/disable"):
        response = await client.post(path, json={"callback_url": CALLBACK},
                                     headers={"Authorization": "Bearer reconcile-SECRET"})
        assert_envelope(response, 403, "forbidden")


async def test_register_while_another_registration_holds_the_lock_is_409(
    client: httpx.AsyncClient, admin: dict[str, str], server: PushServer,
    redis_client: aioredis.Redis,
) -> None:
    await redis_client.set(keys.push_register_lock(sha256_hex(CALLBACK)), "other", ex=360)
    assert_envelope(await register(client, admin, CALLBACK), 409, "conflict")
    assert server.responder.subscriptions == {}


async def test_a_new_url_destroys_the_previous_subscription_first(
    client: httpx.AsyncClient, admin: dict[str, str], server: PushServer,
    redis_client: aioredis.Redis,
) -> None:
    await register(client, admin, CALLBACK)
    destroys_before = sum("destroy" in b["methodCalls"][0][1] for b in server.responder.bodies)
    second = (await register(client, admin, OTHER)).json()["push_subscription_id"]
    [(new_id, sub)] = server.responder.subscriptions.items()  # the old one is gone
    assert new_id == second and sub["url"].startswith(OTHER + "?t=")
    destroys = sum("destroy" in b["methodCalls"][0][1] for b in server.responder.bodies)
    assert destroys == destroys_before + 1
    assert await redis_client.get(keys.push_registration(sha256_hex(CALLBACK))) is None
    assert await redis_client.get(keys.push_registration(sha256_hex(OTHER))) == second
    assert await redis_client.get(keys.PUSH_REGISTRATION_CURRENT) == (
        f"{sha256_hex(OTHER)}:{second}")


async def test_a_previous_subscription_the_server_will_not_destroy_becomes_an_orphan_and_is_swept(
    client: httpx.AsyncClient, admin: dict[str, str], server: PushServer,
    redis_client: aioredis.Redis,
) -> None:
    await register(client, admin, CALLBACK)
    server.responder.refuse_destroy = True
    assert (await register(client, admin, OTHER)).json() == {"push_subscription_id": "P2"}
    assert await redis_client.exists(keys.push_orphan("P1"))
    assert await redis_client.ttl(keys.push_orphan("P1")) > 600_000

    server.responder.refuse_destroy = False
    await redis_client.delete(keys.ORPHAN_SWEEP_SCHEDULE)
    await enable(client, admin)  # the built-in scheduler sweeps orphans
    async def swept() -> bool:
        return not await redis_client.exists(keys.push_orphan("P1"))
    await eventually(swept, "the orphan swept", 3)
    assert list(server.responder.subscriptions) == ["P2"]


async def test_disable_destroys_the_subscription_and_forgets_it(
    client: httpx.AsyncClient, admin: dict[str, str], server: PushServer,
    redis_client: aioredis.Redis,
) -> None:
    await register(client, admin, CALLBACK)
    response = await client.post("/api/push/disable", headers=admin,
                                 json={"callback_url": CALLBACK})
    assert response.status_code == 200 and response.json() == {"disabled": True}
    assert server.responder.subscriptions == {}
    assert await redis_client.get(keys.push_registration(sha256_hex(CALLBACK))) is None
    assert await redis_client.get(keys.PUSH_REGISTRATION_CURRENT) is None
    assert await redis_client.get(keys.push_subscription_status("P1")) == "disabled"
    assert await redis_client.exists(keys.PUSH_LIFECYCLE) == 0
    again = await client.post("/api/push/disable", headers=admin, json={"callback_url": CALLBACK})
    assert_envelope(again, 404, "push_subscription_not_found")


async def test_disable_while_the_register_lock_is_held_is_409_and_keeps_everything(
    client: httpx.AsyncClient, admin: dict[str, str], server: PushServer,
    redis_client: aioredis.Redis,
) -> None:
    """Bug caught: a disable racing a maintenance pass that re-creates the subscription would
    forget the registration while the new subscription lives on (an unmanaged orphan)."""
    await register(client, admin, CALLBACK)
    await redis_client.set(keys.push_register_lock(sha256_hex(CALLBACK)), "maintenance", ex=60)
    response = await client.post("/api/push/disable", headers=admin,
                                 json={"callback_url": CALLBACK})
    assert_envelope(response, 409, "conflict")
    assert list(server.responder.subscriptions) == ["P1"]
    assert await redis_client.get(keys.push_registration(sha256_hex(CALLBACK))) == "P1"


async def test_disable_when_the_server_refuses_is_503_and_keeps_the_mapping(
    client: httpx.AsyncClient, admin: dict[str, str], server: PushServer,
    redis_client: aioredis.Redis,
) -> None:
    await register(client, admin, CALLBACK)
    server.responder.refuse_destroy = True
    response = await client.post("/api/push/disable", headers=admin,
                                 json={"callback_url": CALLBACK})
    assert_envelope(response, 503, "push_destroy_failed")
    assert response.headers["retry-after"] == "30"
    assert await redis_client.get(keys.push_registration(sha256_hex(CALLBACK))) == "P1"


async def test_unknown_callback_disable_is_404(
    client: httpx.AsyncClient, admin: dict[str, str]
) -> None:
    response = await client.post("/api/push/disable", headers=admin,
                                 json={"callback_url": OTHER})
    assert_envelope(response, 404, "push_subscription_not_found")


def verification(sub_id: str, code: str) -> dict[str, str]:
    return {"@type": "PushVerification", "pushSubscriptionId": sub_id, "verificationCode": code}


def pushed_to(server: PushServer, sub_id: str = "P1") -> str:
    """Where the server posts for `sub_id`: its callback URL, token included (issue #23)."""
    return callback_path(server.responder.subscriptions[sub_id]["url"])


async def test_push_verification_is_completed_with_the_server_and_its_digest_stored(
    client: httpx.AsyncClient, admin: dict[str, str], server: PushServer,
    redis_client: aioredis.Redis,
) -> None:
    await register(client, admin, CALLBACK)
    await enable(client, admin)
    code = server.responder.codes["P1"]
    response = await client.post(pushed_to(server), json=verification("P1", code))
    assert response.status_code == 204, response.text
    assert server.responder.subscriptions["P1"]["verificationCode"] == code
    assert await redis_client.get(keys.push_subscription("P1")) == sha256_hex(code)
    assert await redis_client.get(keys.push_subscription_status("P1")) == "verified"
    # a repeat of the same verification is answered without asking the server again
    calls = len(server.responder.bodies)
    assert (await client.post(pushed_to(server), json=verification("P1", code))
            ).status_code == 204
    assert len(server.responder.bodies) == calls


async def test_a_wrong_code_is_503_then_rate_limited(
    client: httpx.AsyncClient, admin: dict[str, str], server: PushServer,
    redis_client: aioredis.Redis,
) -> None:
    await register(client, admin, CALLBACK)
    await enable(client, admin)
    first = await client.post(pushed_to(server), json=verification("P1", "wrong"))
    assert_envelope(first, 503, "push_verify_failed")
    second = await client.post(pushed_to(server), json=verification("P1", "wrong"))
    assert_envelope(second, 429, "push_verify_rate_limited")
    assert second.headers["retry-after"] == "30"
    assert await redis_client.get(keys.push_subscription("P1")) is None


async def test_a_verification_for_a_subscription_we_never_made_is_401(
    client: httpx.AsyncClient, admin: dict[str, str], server: PushServer,
) -> None:
    await register(client, admin, CALLBACK)
    await enable(client, admin)
    calls = len(server.responder.bodies)
    response = await client.post(pushed_to(server), json=verification("P99", "code"))
    assert_envelope(response, 401, "unauthorized")
    assert len(server.responder.bodies) == calls


def state_change(account: str) -> dict[str, object]:
    return {"@type": "StateChange", "changed": {account: {"Email": "s2"}}}


def answer_of(response: httpx.Response) -> tuple[int, bytes, list[tuple[str, str]]]:
    """Everything a sender sees, but the request id (fresh for every answer)."""
    headers = sorted((k, v) for k, v in response.headers.multi_items() if k != "x-request-id")
    return response.status_code, response.content, headers


async def test_a_state_change_tells_neither_the_account_id_nor_the_registration(
    client: httpx.AsyncClient, admin: dict[str, str], server: PushServer,
    redis_client: aioredis.Redis,
) -> None:
    """Bug caught (issue #12): a StateChange for another account answered 403, ours 204 and
    one without a registration 401, so anyone could guess the account id (and see whether push
    was registered). Without the callback token (issue #23) every post is the same 401,
    registered or not; with it, every well-formed StateChange gets the same 204, and only ours,
    with the switch on, is acted on."""
    await enable(client, admin)
    unregistered = await client.post("/push/jmap", json=state_change("u1"))
    await register(client, admin, CALLBACK)
    code = server.responder.codes["P1"]
    assert (await client.post(pushed_to(server), json=verification("P1", code))
            ).status_code == 204
    anonymous = await client.post("/push/jmap", json=state_change("u1"))
    assert_envelope(anonymous, 401, "unauthorized")
    assert (anonymous.status_code, anonymous.headers.get("www-authenticate")) == (
        unregistered.status_code, unregistered.headers.get("www-authenticate"))
    wrong = await client.post(pushed_to(server), json=state_change("u2"))
    assert await redis_client.get(keys.PUSH_LAST_STATE_CHANGE) is None  # ignored
    right = await client.post(pushed_to(server), json=state_change("u1"))
    assert await redis_client.get(keys.PUSH_LAST_STATE_CHANGE) is not None  # acted on
    await client.put("/api/enabled", headers=admin, json={"enabled": False})
    switched_off = await client.post(pushed_to(server), json=state_change("u1"))

    assert answer_of(right) == answer_of(wrong) == answer_of(switched_off)
    assert right.status_code == 204 and right.content == b""
