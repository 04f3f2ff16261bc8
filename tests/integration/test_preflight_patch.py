"""Preflight of a patch merged onto the stored configuration (stored secrets are not re-typed),
against a real Redis and the real Cyrus JMAP server."""

import httpx
import redis.asyncio as aioredis

from messageweave.store import keys
from tests.helpers import assert_envelope, login, sample_wire, snapshot
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator
from tests.served import peer_wire

PREFLIGHT = "/api/business-config/preflight"


async def test_empty_patch_probes_the_stored_configuration_with_its_stored_secrets(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> None:
    headers = await login(client)
    saved = await client.put("/api/business-config", headers=headers,
                             json=peer_wire(cyrus, telegram_emulator))
    assert saved.status_code == 200, saved.text
    before = await snapshot(redis_client)
    response = await client.post(PREFLIGHT, json={}, headers=headers)
    assert response.status_code == 200
    assert response.json() == {"persisted": False, "validation": {"ok": True, "errors": []},
                               "components": {"jmap": {"ok": True}, "replies": {"ok": True},
                                              "telegram": {"ok": True},
                                              "llm": None}}
    assert await snapshot(redis_client) == before


async def test_patched_field_is_probed_instead_of_the_stored_one_and_nothing_is_written(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> None:
    headers = await login(client)
    await client.put("/api/business-config", headers=headers,
                     json=peer_wire(cyrus, telegram_emulator))
    before = await snapshot(redis_client)
    response = await client.post(PREFLIGHT, headers=headers,
                                 json={"jmap_password": "wrong-SECRET", "revision": 1})
    body = response.json()
    assert body["validation"] == {"ok": True, "errors": []}
    assert body["components"]["jmap"]["ok"] is False
    assert "wrong-SECRET" not in response.text
    assert await snapshot(redis_client) == before
    live = await client.get("/api/business-config", headers=headers)
    assert live.json()["values"]["jmap_session_url"] == cyrus.origin + "/"


async def test_patch_breaking_a_rule_reports_the_rule_of_the_merged_configuration(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    headers = await login(client)
    await client.put("/api/business-config", headers=headers, json=sample_wire())
    response = await client.post(PREFLIGHT, headers=headers, json={"chat_allowlist": []})
    assert response.json() == {"persisted": False, "components": None, "validation": {
        "ok": False, "errors": ["CHAT_ALLOWLIST must contain at least one chat id"]}}
    unknown = await client.post(PREFLIGHT, headers=headers, json={"colour": "blue"})
    assert unknown.json()["validation"]["errors"] == ["JSON 不是有效的业务配置对象"]


async def test_patch_without_a_stored_configuration_is_not_a_configuration(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    response = await client.post(PREFLIGHT, headers=await login(client),
                                 json={"jmap_username": "bob"})
    assert response.json()["validation"]["errors"] == ["JSON 不是有效的业务配置对象"]
    assert await snapshot(redis_client) == (None, None)


async def test_full_wire_is_probed_as_sent_even_when_a_configuration_is_stored(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> None:
    headers = await login(client)
    await client.put("/api/business-config", headers=headers,
                     json=peer_wire(cyrus, telegram_emulator))
    response = await client.post(PREFLIGHT, headers=headers, json=sample_wire())
    body = response.json()
    assert body["validation"]["ok"] is True
    assert body["components"]["jmap"]["ok"] is False  # sample_wire's JMAP port is closed


async def test_patch_over_an_undecryptable_stored_configuration_is_503(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    headers = await login(client)
    await redis_client.set(keys.BUSINESS_CONFIG, "v1:00:00")
    response = await client.post(PREFLIGHT, headers=headers, json={"jmap_username": "bob"})
    assert_envelope(response, 503, "service_unavailable")
