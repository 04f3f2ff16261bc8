"""Each credential opens exactly its routes: the table of docs/security.md §3, checked cell by
cell against the real app (real Redis, a live configuration, an admin session)."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import httpx
import pytest
from fastapi import APIRouter
from starlette.routing import Route

import messageweave.api
from messageweave.web import static
from tests.helpers import ADMIN_KEY, assert_envelope, closed_port, login, sample_wire
from tests.integration.test_accounts import family_wire

DOC = Path(__file__).resolve().parents[3] / "docs" / "security.md"

# The table's columns: every route of a group must answer the same for each credential.
ROUTE_GROUPS: dict[str, list[tuple[str, str]]] = {
    "public": [("GET", "/healthz"), ("GET", "/api/status"), ("GET", "/"),
               *(("GET", f"/assets/{name}") for name in static.ASSETS),
               ("GET", "/openapi.json")],
    "webhook": [("POST", "/webhook/tg")],
    "worker": [("POST", "/worker")],
    "reconcile": [("POST", "/reconcile")],
    "kill switch": [("GET", "/api/enabled"), ("PUT", "/api/enabled")],
    "metrics": [("GET", "/metrics")],
    "login": [("POST", "/api/admin/session"), ("POST", "/api/bootstrap")],
    "revoke": [("POST", "/api/admin/session/revoke")],
    "settings": [("GET", "/api/business-config"), ("PUT", "/api/business-config"),
                 ("POST", "/api/business-config/preflight"), ("GET", "/api/config"),
                 ("PUT", "/api/config"), ("POST", "/api/telegram/discover-chats")],
    "registration": [("POST", "/api/telegram/register-webhook"),
                     ("POST", "/api/telegram/delete-webhook"), ("POST", "/api/push/register"),
                     ("POST", "/api/push/disable")],
    "operations": [("GET", "/api/delivery"), ("GET", "/api/dlq"), ("POST", "/api/dlq/replay"),
                   ("GET", "/api/logs/audit"), ("GET", "/api/logs/send"), ("GET", "/api/audit"),
                   ("POST", "/api/audit"), ("GET", "/api/push/status"),
                   ("GET", "/api/telegram/refused-chats"), ("GET", "/api/trace"),
                   ("POST", "/api/rules/dry-run")],
    # Issue #35: `{id}` is the owner's own account, another one, or (admin) the owner's.
    "own account": [("GET", "/api/accounts"), ("GET", "/api/accounts/{id}"),
                    ("PUT", "/api/accounts/{id}"), ("GET", "/api/accounts/{id}/status"),
                    ("POST", "/api/owner/session/revoke")],
    "other account": [("GET", "/api/accounts/{id}"), ("PUT", "/api/accounts/{id}"),
                      ("GET", "/api/accounts/{id}/status")],
    "accounts admin": [("POST", "/api/accounts"), ("DELETE", "/api/accounts/{id}"),
                       ("PUT", "/api/accounts/{id}/enabled"),
                       ("POST", "/api/accounts/{id}/owner-key")],
    "owner login": [("POST", "/api/owner/session")],
}
# The account each column's `{id}` names: the owner key's and session's account is `family`.
OWNER_ACCOUNT = "family"
GROUP_ACCOUNT = {"own account": OWNER_ACCOUNT, "other account": "default",
                 "accounts admin": OWNER_ACCOUNT}
# Authenticated otherwise, and not in the table (docs/security.md §3 says why).
NOT_IN_TABLE = {("GET", "/ready"), ("POST", "/push/jmap")}

WIRE = sample_wire(telegram_api_base_url=f"http://127.0.0.1:{closed_port()}")


def _table() -> list[tuple[str, str, str]]:
    """(credential, group, cell) for every cell of the table in docs/security.md §3."""
    section = DOC.read_text().split("## 3. Who can call what", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in section.splitlines() if line.startswith("|")]
    header, body = rows[0], rows[2:]
    return [(row[0], group, cell) for row in body for group, cell in zip(header[1:], row[1:],
                                                                          strict=True)]


TABLE = _table()


async def _owner_key(client: httpx.AsyncClient) -> str:
    made = await client.post(f"/api/accounts/{OWNER_ACCOUNT}/owner-key",
                             headers=await login(client))
    assert made.status_code == 200, made.text
    key: str = made.json()["owner_key"]
    return key


async def _credential(client: httpx.AsyncClient, name: str) -> dict[str, str]:
    """The headers a holder of `name` sends; the webhook secret also as a Bearer (a holder may
    try it anywhere)."""
    if name == "admin session":
        return await login(client)
    if name in ("owner key", "owner session"):
        owner = {"Authorization": f"Bearer {await _owner_key(client)}"}
        if name == "owner key":
            return owner
        opened = await client.post("/api/owner/session", headers=owner)
        assert opened.status_code == 200, opened.text
        return {"Authorization": f"Bearer {opened.json()['session']}"}
    token = {"no credential": None, "telegram webhook secret": WIRE["telegram_webhook_secret"],
             "reconcile token": WIRE["reconcile_token"], "worker token": WIRE["worker_token"],
             "admin key": ADMIN_KEY}[name]
    if token is None:
        return {}
    headers = {"Authorization": f"Bearer {token}"}
    if name == "telegram webhook secret":
        headers["X-Telegram-Bot-Api-Secret-Token"] = str(token)
    return headers


def test_the_table_covers_every_route_and_every_credential() -> None:
    """Catches a new route that nobody placed in the credential table (it would be checked by
    nothing here), and a table that lost a row or a column."""
    grouped = {route for routes in ROUTE_GROUPS.values() for route in routes}
    routers = [static.router, *(getattr(importlib.import_module(f"messageweave.api.{m.name}"),
                                        "router", None)
                                for m in pkgutil.iter_modules(messageweave.api.__path__)
                                if m.name != "debug")]  # /debug/*: its own token, off by default
    mounted = {(method, route.path) for router in routers if isinstance(router, APIRouter)
               for route in router.routes if isinstance(route, Route)
               for method in route.methods - {"HEAD"}}
    assert mounted - NOT_IN_TABLE == grouped, "docs/security.md §3 and the app's routes differ"
    assert {c for c, _, _ in TABLE} == {"no credential", "telegram webhook secret",
                                        "reconcile token", "worker token", "admin key",
                                        "admin session", "owner key", "owner session"}
    assert {g for _, g, _ in TABLE} == set(ROUTE_GROUPS)
    assert {cell for _, _, cell in TABLE} <= {"yes", "401", "403"}


@pytest.mark.parametrize(
    ("credential", "method", "path", "cell"),
    [(c, m, p.replace("{id}", GROUP_ACCOUNT.get(group, "")), cell)
     for c, group, cell in TABLE for m, p in ROUTE_GROUPS[group]],
)
async def test_each_credential_opens_exactly_its_routes(
    client: httpx.AsyncClient, credential: str, method: str, path: str, cell: str
) -> None:
    """Catches a credential that opens more than its row says — above all the worker token
    reading or changing settings (where it could redirect the JMAP password or the bot token),
    registering the webhook or push, or replaying the DLQ — and one that lost a route it needs
    (`/worker`, `/metrics`, the kill switch for the worker token); and (issue #35) an owner
    key or session that opens anything but its own account's routes, or an admin session that
    could open an owner session."""
    setup = await login(client)
    assert (await client.put("/api/business-config", json=WIRE, headers=setup)).status_code \
        == 200
    created = await client.post("/api/accounts", headers=setup, json=family_wire())
    assert created.status_code == 201, created.text
    headers = await _credential(client, credential)
    # An empty body: a route that let the credential through then answers 400, 409, 503 or
    # 200 (nothing sent, nothing written); one that refused it answers 401 or 403.
    response = await client.request(method, path, headers=headers, content=b"")
    if cell == "yes":
        assert response.status_code not in (401, 403, 429), response.text
    elif cell == "401":
        assert_envelope(response, 401, "unauthorized")
    else:
        assert_envelope(response, 403, "forbidden")


async def test_the_worker_token_cannot_redirect_a_secret(client: httpx.AsyncClient) -> None:
    """Catches the reported hole itself: with the worker token, a PUT of a new
    `jmap_session_url` or `telegram_api_base_url` (where the service would then send the JMAP
    password or the bot token) must change nothing."""
    admin = await login(client)
    assert (await client.put("/api/business-config", json=WIRE, headers=admin)).status_code == 200
    worker = {"Authorization": f"Bearer {WIRE['worker_token']}"}
    for patch in ({"jmap_session_url": "https://attacker.example/jmap"},
                  {"telegram_api_base_url": "https://attacker.example"}):
        response = await client.put("/api/business-config", json=patch, headers=worker)
        assert_envelope(response, 403, "forbidden")
    values = (await client.get("/api/business-config", headers=admin)).json()["values"]
    assert values["jmap_session_url"] == WIRE["jmap_session_url"]
    assert values["telegram_api_base_url"] == WIRE["telegram_api_base_url"]
