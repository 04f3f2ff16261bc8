"""Owner keys and owner sessions (issue #35, SPEC G.3): an owner reaches its own account and
nothing else."""

from __future__ import annotations

import time

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.api.openapi import schema_of
from messageweave.app import create_app
from messageweave.store import keys
from messageweave.store.account_sweep import sweep_once
from messageweave.store.oplog import audit_log
from tests.helpers import assert_envelope, fastapi_of, login, settings_for
from tests.integration.test_accounts import family_wire, with_family

# Routes anyone may call, or that take a credential of their own (the webhook's header, the
# push callback token): an owner session is no credential there, so it is not refused either.
PUBLIC = {("get", "/healthz"), ("get", "/ready"), ("get", "/api/status"), ("get", "/"),
          ("post", "/webhook/tg"), ("post", "/push/jmap")}
# What an owner session of `family` may call (SPEC G.3).
OWN = {("get", "/api/accounts"), ("get", "/api/accounts/{id}"), ("put", "/api/accounts/{id}"),
       ("get", "/api/accounts/{id}/status"), ("post", "/api/owner/session/revoke")}


def _routes() -> list[tuple[str, str]]:
    """Every operation of the app's route table (as its schema publishes it): a route added
    later is refused to owners here unless it is listed above."""
    app = fastapi_of(create_app(settings_for("redis://127.0.0.1:1/0")))
    return sorted((method, path) for path, item in schema_of(app)["paths"].items()
                  for method in item)


async def owner_session(client: httpx.AsyncClient, admin: dict[str, str],
                        account: str = "family") -> tuple[str, dict[str, str]]:
    """A new owner key of `account` and a session opened with it (its headers)."""
    made = await client.post(f"/api/accounts/{account}/owner-key", headers=admin)
    assert made.status_code == 200, made.text
    owner_key = made.json()["owner_key"]
    opened = await client.post("/api/owner/session",
                               headers={"Authorization": f"Bearer {owner_key}"})
    assert opened.status_code == 200, opened.text
    return owner_key, {"Authorization": f"Bearer {opened.json()['session']}"}


async def test_an_owner_session_reads_and_changes_only_its_own_account(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    """Catches an owner key shown twice or stored in clear, a session without the contract's
    fields, or an owner who sees or changes another account."""
    admin = await with_family(client)
    made = await client.post("/api/accounts/family/owner-key", headers=admin)
    owner_key = made.json()["owner_key"]
    assert len(owner_key) >= 32 and set(made.json()) == {"owner_key"}
    stored = await redis_client.get("a:{family}:owner_key")
    assert stored and owner_key not in stored and len(stored) == 64
    opened = await client.post("/api/owner/session",
                               headers={"Authorization": f"Bearer {owner_key}"})
    assert opened.status_code == 200, opened.text
    body = opened.json()
    assert body["expires_in"] == 1800 and body["account"] == "family"
    assert len(body["session"]) >= 32 and body["session"] != owner_key
    owner = {"Authorization": f"Bearer {body['session']}"}

    listed = (await client.get("/api/accounts", headers=owner)).json()["accounts"]
    assert [a["id"] for a in listed] == ["family"]
    assert (await client.get("/api/accounts/family", headers=owner)).status_code == 200
    assert (await client.get("/api/accounts/family/status", headers=owner)).status_code == 200
    saved = await client.put("/api/accounts/family", headers=owner, json={"bot_language": "en"})
    assert saved.status_code == 200, saved.text
    assert (await client.get("/api/accounts/family", headers=admin)
            ).json()["values"]["bot_language"] == "en"
    for method, path in [("GET", "/api/accounts/default"), ("PUT", "/api/accounts/default"),
                         ("GET", "/api/accounts/default/status"),
                         ("GET", "/api/accounts/nobody")]:
        answer = await client.request(method, path, headers=owner, json={"name": "x"})
        assert_envelope(answer, 403, "forbidden")
    # The owner key itself opens nothing but a session.
    key = {"Authorization": f"Bearer {owner_key}"}
    assert_envelope(await client.get("/api/accounts/family", headers=key), 403, "forbidden")


@pytest.mark.parametrize(("method", "path"), [
    r for r in _routes() if r not in PUBLIC and r not in OWN
    and not r[1].startswith("/assets/")])  # the page's files: public
async def test_an_owner_session_is_refused_every_other_route(
    client: httpx.AsyncClient, method: str, path: str
) -> None:
    """Catches an admin route (or an owner's own-account route other than GET/PUT and
    status) that accepts an owner session."""
    admin = await with_family(client)
    _key, owner = await owner_session(client, admin)
    answer = await client.request(method.upper(), path.replace("{id}", "family"),
                                  headers=owner, json={})
    assert_envelope(answer, 403, "forbidden")


async def test_a_new_owner_key_ends_the_old_keys_sessions(client: httpx.AsyncClient) -> None:
    """Catches a rotated owner key, or a session it opened, that still opens anything."""
    admin = await with_family(client)
    old_key, old_session = await owner_session(client, admin)
    _new_key, new_session = await owner_session(client, admin)
    assert_envelope(await client.get("/api/accounts/family", headers=old_session),
                    401, "unauthorized")
    assert_envelope(await client.post("/api/owner/session",
                                      headers={"Authorization": f"Bearer {old_key}"}),
                    401, "unauthorized")
    assert (await client.get("/api/accounts/family", headers=new_session)).status_code == 200


async def test_an_owners_sign_out_ends_that_session_and_no_other(
    client: httpx.AsyncClient, redis_client: aioredis.Redis,
) -> None:
    """Catches an owner's sign-out that only forgets the token in the page: the session (a
    copy of it, on a shared computer) kept opening the account for 30 minutes. Also catches a
    sign-out that ends the owner's other devices' sessions, or that an owner could aim at
    another account."""
    admin = await with_family(client)
    owner_key, phone = await owner_session(client, admin)
    opened = await client.post("/api/owner/session",
                               headers={"Authorization": f"Bearer {owner_key}"})
    laptop = {"Authorization": f"Bearer {opened.json()['session']}"}
    assert_envelope(await client.post("/api/owner/session/revoke", headers=phone,
                                      json={"account": "default"}), 403, "forbidden")
    ended = await client.post("/api/owner/session/revoke", headers=phone)
    assert ended.status_code == 204, ended.text
    assert_envelope(await client.get("/api/accounts/family", headers=phone),
                    401, "unauthorized")
    assert (await client.get("/api/accounts/family", headers=laptop)).status_code == 200
    assert_envelope(await client.post("/api/owner/session/revoke", headers=phone),
                    401, "unauthorized")
    newest = (await audit_log(redis_client).page(None, 1)).records[0]
    assert {"action": "owner_session_revoked", "account": "family",
            "by": "owner_session"}.items() <= newest.items()


async def test_an_admin_ends_every_session_of_an_owner_and_keeps_the_key(
    client: httpx.AsyncClient,
) -> None:
    """Catches an admin who cannot sign a lost phone out without making a new owner key (the
    owner would need a new key handed over), or an admin sign-out of the wrong account."""
    admin = await with_family(client)
    owner_key, session = await owner_session(client, admin)
    assert_envelope(await client.post("/api/owner/session/revoke", headers=admin),
                    400, "invalid_request")
    assert_envelope(await client.post("/api/owner/session/revoke", headers=admin,
                                      json={"account": "nobody"}), 404, "not_found")
    assert (await client.post("/api/owner/session/revoke", headers=admin,
                              json={"account": "family"})).status_code == 204
    assert_envelope(await client.get("/api/accounts/family", headers=session),
                    401, "unauthorized")
    again = await client.post("/api/owner/session",
                              headers={"Authorization": f"Bearer {owner_key}"})
    assert again.status_code == 200, again.text


async def test_a_deleted_accounts_owner_session_opens_nothing(
    client: httpx.AsyncClient, redis_client: aioredis.Redis,
) -> None:
    """Catches an owner session that outlives its account (and could see a new account made
    later with the same id)."""
    admin = await with_family(client)
    _key, owner = await owner_session(client, admin)
    assert (await client.delete("/api/accounts/family", headers=admin)).status_code == 204
    # The id is free again once its sweep ended (reference §1.12): the pass after the window.
    late = int(time.time() * 1000) + keys.ACCOUNT_DELETE_WINDOW_S * 1000
    assert await sweep_once(redis_client, now_ms=late) == ["family"]
    again = await client.post("/api/accounts", headers=admin, json=family_wire())
    assert again.status_code == 201
    assert_envelope(await client.get("/api/accounts/family", headers=owner),
                    401, "unauthorized")


async def test_failed_owner_keys_lock_the_client_out(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    """Catches owner keys guessed without limit: failed ones are counted like every
    credential, and a locked client is 429 even with the right key."""
    admin = await with_family(client)
    owner_key, _session = await owner_session(client, admin)
    for attempt in range(keys.THROTTLE_MAX_FAILURES):
        wrong = await client.post("/api/owner/session",
                                  headers={"Authorization": f"Bearer family.guess{attempt}"})
        assert_envelope(wrong, 401, "unauthorized")
    locked = await client.post("/api/owner/session",
                               headers={"Authorization": f"Bearer {owner_key}"})
    assert_envelope(locked, 429, "rate_limited")
    assert int(locked.headers["retry-after"]) > 0


async def test_the_mailbox_routes_take_an_account(client: httpx.AsyncClient) -> None:
    """Catches `?account=` ignored on the routes that act on one mailbox: an unknown account
    must be 404, and another account is answered from its own mailbox and keys (its mail server
    here is a closed port: 503), never refused as "not served yet" (409) nor answered with
    `default`'s (tests/integration/accounts/test_mailbox_actions.py has them with mail)."""
    admin = await with_family(client)
    for method, path, status in [("GET", "/api/trace?q=x", 503),
                                 ("POST", "/api/rules/dry-run", 503),
                                 ("GET", "/api/audit", 200), ("GET", "/api/dlq", 200),
                                 ("GET", "/api/delivery", 200)]:
        sep = "&" if "?" in path else "?"
        assert_envelope(await client.request(method, f"{path}{sep}account=nobody",
                                             headers=admin), 404, "not_found")
        answer = await client.request(method, f"{path}{sep}account=family", headers=admin)
        assert answer.status_code == status, (path, answer.text)
    audit = await client.get("/api/audit?account=default", headers=await login(client))
    assert audit.status_code == 200 and audit.json() == {"last": None}
