"""Probes, the static page's headers, and the debug surface gate."""

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.web.static import CSP
from tests.conftest import login, running_client, sample_wire, settings_for
from tests.integration.test_envelope import assert_envelope


async def test_healthz_and_status(client: httpx.AsyncClient) -> None:
    health = await client.get("/healthz")
    assert health.status_code == 200 and health.text == "ok"
    status = await client.get("/api/status")
    assert status.json()["mode"] == "configured"


async def test_version_is_computed_once(client: httpx.AsyncClient) -> None:
    first = (await client.get("/api/status")).json()["version"]
    sha, built = first.split("+")
    assert sha and built.endswith("Z")
    assert (await client.get("/api/status")).json()["version"] == first


async def test_ready_is_503_until_configured(client: httpx.AsyncClient) -> None:
    response = await client.get("/ready")
    assert_envelope(response, 503, "service_unavailable")
    assert response.headers["retry-after"] == "30"


async def test_ready_is_503_when_upstreams_fail(client: httpx.AsyncClient) -> None:
    await client.put("/api/business-config", json=sample_wire(), headers=await login(client))
    response = await client.get("/ready")
    assert_envelope(response, 503, "service_unavailable")


async def test_ready_is_503_when_redis_is_gone(embedded_redis_url: str) -> None:
    from tests.conftest import free_port

    settings = settings_for(f"redis://127.0.0.1:{free_port()}/0")
    async with running_client(settings) as c:
        assert_envelope(await c.get("/ready"), 503, "service_unavailable")
        assert (await c.get("/healthz")).status_code == 200


@pytest.mark.parametrize(("path", "media"), [
    ("/", "text/html; charset=utf-8"),
    ("/assets/config.js", "text/javascript; charset=utf-8"),
    ("/assets/styles.css", "text/css; charset=utf-8"),
])
async def test_assets_carry_the_strict_headers(
    client: httpx.AsyncClient, path: str, media: str
) -> None:
    response = await client.get(path)
    assert response.status_code == 200 and response.headers["content-type"] == media
    assert response.headers["cache-control"] == "no-store"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"
    if path == "/":
        assert response.headers["content-security-policy"] == CSP
        assert response.headers["x-frame-options"] == "DENY"
    else:
        assert "content-security-policy" not in response.headers


async def test_debug_surface_absent_unless_requested_with_a_token(
    embedded_redis_url: str, redis_client: aioredis.Redis
) -> None:
    for overrides in ({}, {"debug_requested": True}, {"debug_token": "dbg"}):
        async with running_client(settings_for(embedded_redis_url, **overrides)) as c:
            response = await c.get("/debug/ping", headers={"Authorization": "Bearer dbg"})
            assert_envelope(response, 404, "not_found")
    settings = settings_for(embedded_redis_url, debug_requested=True, debug_token="dbg")
    async with running_client(settings) as c:
        assert (await c.get("/debug/ping", headers={"Authorization": "Bearer dbg"})).json() == \
            {"ok": True}
        assert_envelope(await c.get("/debug/ping"), 401, "unauthorized")
        assert_envelope(await c.get("/debug/ping", headers={"Authorization": "Bearer x"}),
                        401, "unauthorized")
