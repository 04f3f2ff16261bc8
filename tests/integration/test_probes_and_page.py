"""Probes, the static page's headers, and the debug surface gate."""

import re
from importlib import resources

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.web.static import ASSETS, CSP, SCRIPTS, ZONES_MARKER, ZONES_MODULE
from tests.helpers import assert_envelope, login, running_client, sample_wire, settings_for


async def test_healthz_and_status(client: httpx.AsyncClient) -> None:
    health = await client.get("/healthz")
    assert health.status_code == 200 and health.text == "ok"
    status = await client.get("/api/status")
    assert status.json()["mode"] == "configured"


async def test_settings_saved_is_false_before_any_save_and_true_after(
    client: httpx.AsyncClient,
) -> None:
    """Bug (issue #15): before anything was saved, the status said only `mode: configured`, so
    the page claimed "The service is configured" while `/ready` answered 503."""
    before = (await client.get("/api/status")).json()
    assert before["mode"] == "configured" and before["settings_saved"] is False
    assert set(before) == {"ready", "mode", "missing", "version", "settings_saved"}
    save = await client.put("/api/business-config", json=sample_wire(),
                            headers=await login(client))
    assert save.status_code == 200, save.text
    after = (await client.get("/api/status")).json()
    assert after["settings_saved"] is True and after["mode"] == "configured"


async def test_settings_saved_by_another_instance_shows_without_a_restart(
    embedded_redis_url: str, redis_client: aioredis.Redis
) -> None:
    """Bug: a status read from this instance's memory alone would stay "not configured" on
    every instance but the one that took the save."""
    settings = settings_for(embedded_redis_url)
    async with running_client(settings) as reader, running_client(settings) as writer:
        assert (await reader.get("/api/status")).json()["settings_saved"] is False
        save = await writer.put("/api/business-config", json=sample_wire(),
                                headers=await login(writer))
        assert save.status_code == 200, save.text
        assert (await reader.get("/api/status")).json()["settings_saved"] is True


async def test_version_is_computed_once(client: httpx.AsyncClient) -> None:
    """The build fingerprint, for an admin session (the public sees the release only, issue
    #23: tests/integration/security/test_public_status.py)."""
    admin = await login(client)
    first = (await client.get("/api/status", headers=admin)).json()["version"]
    sha, built = first.split("+")
    assert sha and built.endswith("Z")
    assert (await client.get("/api/status", headers=admin)).json()["version"] == first


async def test_ready_is_503_until_configured(client: httpx.AsyncClient) -> None:
    response = await client.get("/ready")
    assert_envelope(response, 503, "service_unavailable")
    assert response.headers["retry-after"] == "30"


async def test_ready_is_503_when_upstreams_fail(client: httpx.AsyncClient) -> None:
    await client.put("/api/business-config", json=sample_wire(), headers=await login(client))
    response = await client.get("/ready")
    assert_envelope(response, 503, "service_unavailable")


async def test_ready_is_503_when_redis_is_gone(embedded_redis_url: str) -> None:
    from tests.helpers import free_port

    settings = settings_for(f"redis://127.0.0.1:{free_port()}/0")
    async with running_client(settings) as c:
        assert_envelope(await c.get("/ready"), 503, "service_unavailable")
        assert (await c.get("/healthz")).status_code == 200


@pytest.mark.parametrize(("path", "media"), [
    ("/", "text/html; charset=utf-8"),
    *((f"/assets/{name}", media) for name, media in ASSETS.items()),
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


async def test_the_page_loads_its_entry_module_and_every_module_is_served_by_name_only(
    client: httpx.AsyncClient,
) -> None:
    """The page is native ES modules under `script-src 'self'`: one `type="module"` entry, each
    module on its own fixed route, imports only of served modules, and nothing else readable
    under /assets/ (an old, unknown, traversing or differently cased name is a 404)."""
    page = (await client.get("/")).text
    assert page.count("<script") == 1
    assert '<script type="module" src="/assets/main.js"></script>' in page
    packaged = {p.name for p in resources.files("messageweave.web").iterdir()
                if p.name.endswith(".js")}
    assert packaged == set(SCRIPTS)
    for name in SCRIPTS:
        response = await client.get(f"/assets/{name}")
        assert response.status_code == 200, name
        assert response.headers["content-type"] == "text/javascript; charset=utf-8"
        assert set(re.findall(r'\bfrom "\./([^"]+)"', response.text)) <= set(SCRIPTS), name
        assert len(response.text.splitlines()) <= 400, f"{name} is over 400 lines"
    zones = (await client.get(f"/assets/{ZONES_MODULE}")).text
    assert ZONES_MARKER.decode() not in zones and '"America/Argentina/Buenos_Aires"' in zones
    for path in ("/assets/config.js", "/assets/nope.js", "/assets/Main.js", "/assets/static.py",
                 "/assets/index.html", "/assets/__init__.py", "/assets/%2e%2e/static.py",
                 "/assets/..%2fstatic.py", "/assets/web/main.js", "/assets/"):
        assert_envelope(await client.get(path), 404, "not_found")


async def test_debug_surface_absent_unless_requested_with_a_token(
    embedded_redis_url: str, redis_client: aioredis.Redis
) -> None:
    dbg = "dbg-" + "x" * 28  # 32 characters, the least DEBUG_TOKEN may have (issue #23)
    for overrides in ({}, {"debug_requested": True}, {"debug_token": dbg}):
        async with running_client(settings_for(embedded_redis_url, **overrides)) as c:
            response = await c.get("/debug/ping", headers={"Authorization": f"Bearer {dbg}"})
            assert_envelope(response, 404, "not_found")
    settings = settings_for(embedded_redis_url, debug_requested=True, debug_token=dbg)
    async with running_client(settings) as c:
        assert (await c.get("/debug/ping", headers={"Authorization": f"Bearer {dbg}"})
                ).json() == {"ok": True}
        assert_envelope(await c.get("/debug/ping"), 401, "unauthorized")
        assert_envelope(await c.get("/debug/ping", headers={"Authorization": "Bearer x"}),
                        401, "unauthorized")
