"""`/ready` and "persist and report" against the real peers: Cyrus JMAP and the Bot API emulator."""

import secrets

import httpx
import redis.asyncio as aioredis

from tests.conftest import CYRUS_PASSWORD, CYRUS_USER, login, sample_wire
from tests.integration.test_envelope import assert_envelope
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator


def peer_wire(cyrus: CyrusServer, emulator: TelegramEmulator, **overrides: object) -> dict:
    values: dict[str, object] = {
        "jmap_session_url": cyrus.origin + "/",
        "jmap_username": CYRUS_USER,
        "jmap_password": CYRUS_PASSWORD,
        "telegram_api_base_url": emulator.base_url,
        "bot_token": f"{secrets.randbelow(10**9)}:{secrets.token_urlsafe(20)}",
    }
    values.update(overrides)
    return sample_wire(**values)


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
    assert response.json() == {"status": "ready", "configured": True, "redis": True,
                               "jmap": True, "push": True, "telegram": True}


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
    assert response.json()["components"] == {"jmap": {"ok": True}, "llm": None}
