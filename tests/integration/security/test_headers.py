"""`Cache-Control: no-store` and `X-Content-Type-Options: nosniff` on every answer of every
route family, errors and setup mode included (`messageweave.api.headers`, issue #12)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import redis.asyncio as aioredis
from fastapi import APIRouter

from messageweave.app import create_app
from messageweave.settings import Settings
from messageweave.web import static
from tests.helpers import (
    admin_headers,
    fastapi_of,
    login,
    running_client,
    sample_wire,
    settings_for,
)


def assert_strict(response: httpx.Response) -> None:
    """Each header exactly once: added when missing, never doubled when a route set it."""
    assert response.headers.get_list("cache-control") == ["no-store"], response.headers
    assert response.headers.get_list("x-content-type-options") == ["nosniff"], response.headers


async def test_api_answers_are_not_cacheable_nor_sniffable(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    """Bug caught (issue #12): `POST /api/admin/session` (which returns the session) and
    `GET /api/business-config` carried neither header, so a browser or a proxy could keep
    the session and the configuration."""
    saved = await client.put("/api/business-config", headers=await login(client),
                             json=sample_wire())
    assert saved.status_code == 200, saved.text
    login_answer = await client.post("/api/admin/session", headers=admin_headers())
    assert login_answer.status_code == 200 and "session" in login_answer.json()
    assert_strict(login_answer)
    session = {"Authorization": f"Bearer {login_answer.json()['session']}"}
    for method, path in [("GET", "/api/business-config"), ("GET", "/api/config"),
                         ("GET", "/api/enabled"), ("GET", "/api/delivery"),
                         ("GET", "/metrics"), ("GET", "/api/push/status")]:
        response = await client.request(method, path, headers=session)
        assert response.is_success, (path, response.status_code, response.text)
        assert_strict(response)


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/healthz"), ("GET", "/api/status"), ("GET", "/ready"), ("GET", "/openapi.json"),
])
async def test_probes_and_public_routes_carry_both(
    client: httpx.AsyncClient, method: str, path: str
) -> None:
    """Bug caught: the probes (text, JSON, and `/ready`'s 503) had neither header."""
    assert_strict(await client.request(method, path))


async def test_error_answers_carry_both(client: httpx.AsyncClient) -> None:
    """Bug caught: an error envelope is an answer too (401 carries why a credential failed,
    404/405 the routes); the ones FastAPI's handlers make and the 413 `RequestContext` makes
    by itself, before the app, must all carry the headers."""
    answers = {
        401: await client.get("/api/business-config"),
        404: await client.get("/does/not/exist"),
        405: await client.delete("/api/business-config"),
        413: await client.put("/api/business-config", content=b"{" + b" " * (1024 * 1024) + b"}",
                              headers=admin_headers()),
        400: await client.post("/api/bootstrap", content=b"not json", headers=admin_headers()),
    }
    for status, response in answers.items():
        assert response.status_code == status, (status, response.text)
        assert_strict(response)


async def test_a_chunked_413_carries_both(client: httpx.AsyncClient) -> None:
    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: cut off while reading
        for _ in range(20):
            yield b" " * (64 * 1024)

    response = await client.put("/api/business-config", content=chunks(),
                                headers=await login(client))
    assert response.status_code == 413
    assert_strict(response)


async def test_an_unhandled_500_carries_both(embedded_redis_url: str) -> None:
    """Bug caught: the 500 envelope is sent by the outermost Starlette layer, outside any
    middleware added with `add_middleware`; the headers layer sits outside it."""
    asgi = create_app(Settings(redis_url=embedded_redis_url, admin_key="ab" * 32))
    broken = APIRouter()

    @broken.get("/boom")
    async def boom() -> None:
        raise RuntimeError("handler bug")

    fastapi_of(asgi).include_router(broken)
    transport = httpx.ASGITransport(app=asgi, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://mw.test") as c:
        response = await c.get("/boom")
    assert response.status_code == 500
    assert_strict(response)


@pytest.mark.parametrize("path", ["/", *(f"/assets/{name}" for name in static.ASSETS)])
async def test_the_page_keeps_its_own_headers_once(client: httpx.AsyncClient, path: str) -> None:
    """Bug caught: adding the defaults regardless would double the page's own
    `Cache-Control` / `nosniff` (two values: a client may honour either)."""
    response = await client.get(path)
    assert response.status_code == 200
    assert_strict(response)
    assert response.headers["referrer-policy"] == "no-referrer"


async def test_setup_mode_answers_carry_both() -> None:
    """Bug caught: the setup-mode app is built separately; it must get the same layer."""
    settings = Settings(redis_url="", admin_key="short")
    async with running_client(settings) as c:
        assert (await c.get("/api/status")).json()["mode"] == "configuration-setup"
        for path in ("/healthz", "/api/status", "/ready", "/api/business-config", "/nope", "/"):
            assert_strict(await c.get(path))
        assert_strict(await c.post("/api/status"))  # 405


async def test_pushes_and_webhooks_carry_both(
    embedded_redis_url: str, redis_client: aioredis.Redis
) -> None:
    """The unauthenticated ingress routes answer through the same layer."""
    async with running_client(settings_for(embedded_redis_url)) as c:
        push = await c.post("/push/jmap", json={"@type": "StateChange", "changed": {}})
        assert push.status_code == 401  # no callback token (issue #23)
        assert_strict(push)
        webhook = await c.post("/webhook/tg", json={"update_id": 1})
        assert webhook.status_code in (401, 503)
        assert_strict(webhook)
