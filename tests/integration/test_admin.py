"""Admin session, the enabled switch and the runtime parameters (`/api/config`)."""

import re

import httpx
import redis.asyncio as aioredis

from messageweave.store import keys
from messageweave.store.config_store import session_digest
from tests.helpers import ADMIN_KEY, admin_headers, assert_envelope, login, sample_wire


async def test_login_issues_a_session_stored_only_as_a_digest(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    response = await client.post("/api/admin/session", headers=admin_headers())
    assert response.status_code == 200
    body = response.json()
    assert re.fullmatch(r"[0-9a-f]{64}", body["session"]) and body["expires_in"] == 1800
    # bound to the admin key (issue #23): HMAC-SHA256(key, token), never a bare hash
    assert await redis_client.get(keys.ADMIN_SESSION) == session_digest(
        bytes.fromhex(ADMIN_KEY), body["session"])
    ttl = await redis_client.ttl(keys.ADMIN_SESSION)
    assert 1795 <= ttl <= 1800


async def test_login_needs_the_admin_key(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    for headers in ({}, {"Authorization": "Bearer " + "00" * 32},
                    {"Authorization": admin_headers()["Authorization"].lower()}):
        assert_envelope(await client.post("/api/admin/session", headers=headers),
                        401, "unauthorized")
    assert await redis_client.get(keys.ADMIN_SESSION) is None


async def test_expired_session_is_refused(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    headers = await login(client)
    assert (await client.get("/api/enabled", headers=headers)).status_code == 200
    await redis_client.delete(keys.ADMIN_SESSION)  # what expiry does after 1800 s
    assert_envelope(await client.get("/api/enabled", headers=headers), 401, "unauthorized")


async def test_a_new_login_replaces_the_previous_session(client: httpx.AsyncClient) -> None:
    first = await login(client)
    second = await login(client)
    assert_envelope(await client.get("/api/enabled", headers=first), 401, "unauthorized")
    assert (await client.get("/api/enabled", headers=second)).status_code == 200


async def test_revoke_needs_the_session_or_the_admin_key(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    headers = await login(client)
    for bad in ({}, {"Authorization": "Bearer someone-else"}):
        assert_envelope(await client.post("/api/admin/session/revoke", headers=bad),
                        401, "unauthorized")
    assert await redis_client.get(keys.ADMIN_SESSION) is not None
    assert (await client.post("/api/admin/session/revoke", headers=headers)).status_code == 204
    assert await redis_client.get(keys.ADMIN_SESSION) is None
    assert_envelope(await client.get("/api/enabled", headers=headers), 401, "unauthorized")
    await login(client)
    response = await client.post("/api/admin/session/revoke", headers=admin_headers())
    assert response.status_code == 204
    assert await redis_client.get(keys.ADMIN_SESSION) is None


async def test_enabled_switch_defaults_off_and_toggles(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    headers = await login(client)
    assert (await client.get("/api/enabled", headers=headers)).json() == {"enabled": False}
    response = await client.put("/api/enabled", json={"enabled": True}, headers=headers)
    assert response.json() == {"enabled": True}
    assert await redis_client.get(keys.ENABLED) == "1"
    assert (await client.get("/api/enabled", headers=headers)).json() == {"enabled": True}
    for body, status, code in ((b"nope", 400, "invalid_request"),
                               (b'{"enabled":"yes"}', 422, "invalid_configuration"),
                               (b"{}", 422, "invalid_configuration")):
        response = await client.put("/api/enabled", content=body, headers=headers)
        assert_envelope(response, status, code)
        assert await redis_client.get(keys.ENABLED) == "1"
    assert_envelope(await client.put("/api/enabled", json={"enabled": False}), 401,
                    "unauthorized")
    assert await redis_client.get(keys.ENABLED) == "1"


async def test_runtime_parameters_default_validate_and_save(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    headers = await login(client)
    defaults = {"jmap_timeout_ms": 15000, "telegram_timeout_ms": 10000,
                "llm_timeout_ms": 30000, "max_retries": 3}
    assert (await client.get("/api/config", headers=headers)).json() == defaults
    new = {"jmap_timeout_ms": 100, "telegram_timeout_ms": 300000, "llm_timeout_ms": 5000,
           "max_retries": 5}
    response = await client.put("/api/config", json=new, headers=headers)
    assert response.status_code == 200 and response.json() == new
    assert (await client.get("/api/config", headers=headers)).json() == new
    stored = await redis_client.get(keys.OUTBOUND_CONFIG)
    for bad, status, code in (
        ({**new, "max_retries": 6}, 422, "invalid_configuration"),
        ({**new, "jmap_timeout_ms": 99}, 422, "invalid_configuration"),
        ({**new, "llm_timeout_ms": 300001}, 422, "invalid_configuration"),
        ({"jmap_timeout_ms": 1000}, 400, "invalid_request"),
        ({**new, "max_retries": "3"}, 400, "invalid_request"),
        ({**new, "max_retries": -1}, 400, "invalid_request"),
    ):
        assert_envelope(await client.put("/api/config", json=bad, headers=headers), status, code)
        assert await redis_client.get(keys.OUTBOUND_CONFIG) == stored


async def test_corrupt_runtime_parameters_are_503(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    headers = await login(client)
    await redis_client.set(keys.OUTBOUND_CONFIG, "{not json")
    assert_envelope(await client.get("/api/config", headers=headers), 503, "service_unavailable")


async def test_worker_token_of_the_live_config_opens_only_the_kill_switch(
    client: httpx.AsyncClient,
) -> None:
    await client.put("/api/business-config", json=sample_wire(), headers=await login(client))
    worker = {"Authorization": "Bearer worker-token-SECRET"}
    assert_envelope(await client.get("/api/config", headers=worker), 403, "forbidden")
    assert (await client.get("/api/enabled", headers=worker)).status_code == 200
    reconcile = {"Authorization": "Bearer reconcile-SECRET"}
    assert_envelope(await client.get("/api/config", headers=reconcile), 403, "forbidden")
