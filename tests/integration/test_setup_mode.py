"""Setup mode: a missing or invalid required variable serves only the status surface."""

import httpx
import pytest

from messageweave.settings import Settings
from messageweave.web.static import ASSETS
from tests.helpers import running_client

BUSINESS_ROUTES = [
    ("POST", "/webhook/tg"), ("POST", "/push/jmap"), ("POST", "/api/push/register"),
    ("POST", "/api/telegram/register-webhook"), ("POST", "/api/push/disable"),
    ("POST", "/reconcile"), ("POST", "/worker"), ("GET", "/api/config"), ("PUT", "/api/config"),
    ("GET", "/api/enabled"), ("PUT", "/api/enabled"), ("GET", "/api/business-config"),
    ("PUT", "/api/business-config"), ("POST", "/api/business-config/preflight"),
    ("POST", "/api/bootstrap"), ("POST", "/api/admin/session"),
    ("POST", "/api/admin/session/revoke"), ("GET", "/debug/ping"), ("GET", "/nope"),
]


@pytest.fixture
async def setup_client() -> httpx.AsyncClient:
    settings = Settings(redis_url="", admin_key="short", debug_requested=True, debug_token="t")
    async with running_client(settings) as c:
        yield c


async def test_status_lists_the_missing_variables(setup_client: httpx.AsyncClient) -> None:
    response = await setup_client.get("/api/status")
    assert response.status_code == 200
    body = response.json()
    assert body["ready"] is False and body["mode"] == "configuration-setup"
    assert body["missing"] == ["REDIS_URL", "CONFIG_ENCRYPTION_KEY"]
    assert body["version"] and "+" not in body["version"]  # the release only (issue #23)
    assert body["settings_saved"] is False  # nothing can be stored without Redis and a key


async def test_healthz_ok_and_ready_always_503(setup_client: httpx.AsyncClient) -> None:
    assert (await setup_client.get("/healthz")).text == "ok"
    ready = await setup_client.get("/ready")
    assert ready.status_code == 503 and ready.headers["retry-after"] == "30"
    assert set(ready.json()) == {"error", "request_id"}
    assert ready.json()["error"] == "service_unavailable"


async def test_the_page_is_served_in_setup_mode(setup_client: httpx.AsyncClient) -> None:
    page = await setup_client.get("/")
    assert page.status_code == 200 and "MessageWeave" in page.text
    for name in ASSETS:
        assert (await setup_client.get(f"/assets/{name}")).status_code == 200, name


@pytest.mark.parametrize(("method", "path"), BUSINESS_ROUTES)
async def test_every_other_path_is_404(
    setup_client: httpx.AsyncClient, method: str, path: str
) -> None:
    response = await setup_client.request(
        method, path, headers={"Authorization": "Bearer t"}, content=b"{}"
    )
    assert response.status_code == 404
    body = response.json()
    assert body == {"error": "not_found", "request_id": response.headers["x-request-id"]}


async def test_only_redis_missing_is_reported_alone() -> None:
    async with running_client(Settings(redis_url="", admin_key="ab" * 32)) as c:
        assert (await c.get("/api/status")).json()["missing"] == ["REDIS_URL"]
