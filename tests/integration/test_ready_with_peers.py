"""`/ready` and "persist and report" against the real peers: Cyrus JMAP and the Bot API emulator."""

from collections.abc import AsyncIterator

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.store import keys
from tests.helpers import assert_envelope, eventually, login
from tests.integration.mailbox.push_server import PushServer, callback_path
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator
from tests.served import peer_wire, peer_wire_for

CALLBACK = "https://bot.example.org/push/jmap"


async def test_ready_when_config_redis_jmap_and_telegram_answer(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> None:
    saved = await client.put("/api/business-config", headers=await login(client),
                             json=peer_wire(cyrus, telegram_emulator))
    assert saved.status_code == 200, saved.text
    assert saved.json()["runtime_applied"] is True and saved.json()["warnings"] == []
    response = await client.get("/ready")
    assert response.status_code == 200, response.text
    # Saved but not switched on: nothing receives updates or pushes yet (issue #22's labels).
    assert response.json() == {"status": "ready", "configured": True, "redis": True,
                               "jmap": True, "telegram": True, "push": "off", "updates": "off"}


@pytest.fixture
async def push_server(cyrus: CyrusServer, trust_cyrus: None) -> AsyncIterator[PushServer]:
    """A JMAP server that keeps push subscriptions (the RFC-shaped responder; Cyrus has none)."""
    async with PushServer(cyrus) as server:
        yield server


async def test_ready_reports_the_push_it_finds_off_ok_then_degraded(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, push_server: PushServer,
    telegram_emulator: TelegramEmulator,
) -> None:
    """Bug caught (issue #11): `/ready` answered `"push": true` as a constant, so a dead
    subscription was never noticed. Degraded push keeps `/ready` 200: mail still arrives by
    the degraded reconcile schedule."""
    session = await login(client)
    wire = peer_wire_for(push_server.url, telegram_emulator)
    assert (await client.put("/api/business-config", headers=session, json=wire)).is_success
    assert (await client.put("/api/enabled", headers=session, json={"enabled": True})).is_success
    assert (await client.get("/ready")).json()["push"] == "off"  # never registered

    registered = await client.post("/api/push/register", headers=session,
                                   json={"callback_url": CALLBACK})
    sub_id = registered.json()["push_subscription_id"]
    verification = {"@type": "PushVerification", "pushSubscriptionId": sub_id,
                    "verificationCode": push_server.responder.codes[sub_id]}
    pushed_to = callback_path(push_server.responder.subscriptions[sub_id]["url"])
    assert (await client.post(pushed_to, json=verification)).status_code == 204
    ready = await client.get("/ready")
    assert ready.status_code == 200 and ready.json()["push"] == "ok (subscription)"

    push_server.responder.restart()  # the JMAP server lost it…
    push_server.responder.refuse_creates = True  # …and will not take a new one
    await redis_client.delete(keys.PUSH_MAINTENANCE_SCHEDULE)  # the next pass, now

    async def degraded() -> bool:
        body = (await client.get("/ready")).json()
        return bool(body["push"] == "degraded: subscription lost, re-create failed")

    await eventually(degraded, "the loss shown in /ready", 5)
    assert (await client.get("/ready")).status_code == 200

    await client.post("/api/push/disable", headers=session, json={"callback_url": CALLBACK})
    assert (await client.get("/ready")).json()["push"] == "off"


async def test_a_503_names_the_checks_that_failed_and_stays_the_envelope(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> None:
    """Bug caught: fields that were constants after the checks passed; a 503 must say which
    check failed (never a secret) without leaving the error envelope."""
    assert_envelope(await client.get("/ready"), 503, "service_unavailable")
    assert (await client.get("/ready")).headers["x-ready-failed"] == "configured"
    wire = peer_wire(cyrus, telegram_emulator)
    await telegram_emulator.reject_token(str(wire["bot_token"]))
    await client.put("/api/business-config", headers=await login(client), json=wire)
    response = await client.get("/ready")
    assert_envelope(response, 503, "service_unavailable")
    assert response.headers["x-ready-failed"] == "telegram"
    assert str(wire["bot_token"]) not in str(response.headers)


async def test_not_ready_with_a_wrong_jmap_password(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> None:
    wire = peer_wire(cyrus, telegram_emulator, jmap_password="wrong-SECRET")
    saved = await client.put("/api/business-config", headers=await login(client), json=wire)
    body = saved.json()
    assert body["persisted"] is True and body["runtime_applied"] is False
    assert body["warnings"][0]["component"] == "jmap"
    assert "wrong-SECRET" not in saved.text
    assert_envelope(await client.get("/ready"), 503, "service_unavailable")


async def test_unknown_account_id_is_reported_at_the_account_step(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> None:
    wire = peer_wire(cyrus, telegram_emulator, account_id="nobody")
    body = (await client.put("/api/business-config", headers=await login(client),
                             json=wire)).json()
    assert body["runtime_applied"] is False
    assert body["warnings"] == [{"component": "jmap", "step": "account",
                                 "detail": "ACCOUNT_ID is not in session accounts"}]


async def test_not_ready_when_telegram_rejects_the_token(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> None:
    wire = peer_wire(cyrus, telegram_emulator)
    await telegram_emulator.reject_token(wire["bot_token"])
    await client.put("/api/business-config", headers=await login(client), json=wire)
    assert_envelope(await client.get("/ready"), 503, "service_unavailable")


async def test_preflight_against_real_jmap_reports_ok(
    client: httpx.AsyncClient, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
    trust_cyrus: None,
) -> None:
    response = await client.post("/api/business-config/preflight", headers=await login(client),
                                 json=peer_wire(cyrus, telegram_emulator))
    assert response.json()["components"] == {"jmap": {"ok": True}, "replies": {"ok": True},
                                              "telegram": {"ok": True},
                                              "llm": None}
