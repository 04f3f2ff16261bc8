"""The account routes of SPEC G.3 (issue #35) against a real Redis and the served app."""

from __future__ import annotations

from typing import Any

import httpx
import redis.asyncio as aioredis

from messageweave.store import keys
from messageweave.store.keys import AccountKeys
from tests.helpers import (
    ADMIN_KEY,
    all_keys,
    assert_envelope,
    closed_port,
    first_save,
    login,
    sample_wire,
    snapshot,
    stored_wire,
)

FAMILY_SECRET = "family-jmap-SECRET"


def family_wire(**overrides: Any) -> dict[str, Any]:
    wire: dict[str, Any] = {
        "id": "family", "name": "Family",
        "telegram_chat_id": 5151, "chat_allowlist": [5151, 5152],
        "jmap_session_url": f"https://127.0.0.1:{closed_port()}/",
        "jmap_username": "bob", "jmap_password": FAMILY_SECRET,
        "timezone": "Europe/Berlin",
    }
    wire.update(overrides)
    return wire


async def with_family(client: httpx.AsyncClient, **overrides: Any) -> dict[str, str]:
    """A stored business configuration (`default`, chat 4242) and account `family`; the admin
    session's headers."""
    assert (await first_save(client)).status_code == 200
    admin = await login(client)
    created = await client.post("/api/accounts", headers=admin, json=family_wire(**overrides))
    assert created.status_code == 201, created.text
    return admin


async def test_a_new_account_is_listed_and_read_back_without_its_secrets(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    """Catches an account whose POST answer, listing or read-back differs from SPEC G.3, or
    that shows (or stores in clear) its mail password."""
    assert (await first_save(client)).status_code == 200
    admin = await login(client)
    created = await client.post("/api/accounts", headers=admin, json=family_wire())
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["id"] == "family" and body["revision"] == 1
    # The runtime serves it at once (its mail peers are built without I/O: issue #35).
    assert body["runtime_applied"] is True and body["warnings"] == []

    listed = await client.get("/api/accounts", headers=admin)
    assert listed.status_code == 200
    accounts = listed.json()["accounts"]
    assert [a["id"] for a in accounts] == ["default", "family"]
    family = accounts[1]
    assert family["name"] == "Family" and family["enabled"] is True and family["revision"] == 1
    assert family["values"]["chat_allowlist"] == [5151, 5152]
    assert family["values"]["timezone"] == "Europe/Berlin"
    assert family["values"]["bot_language"] == "zh"  # a field left out: its default
    assert "bot_token" not in family["values"]  # deployment-wide: not an account field
    assert family["secrets_present"] == {"jmap_password": True, "imap_password": False,
                                         "smtp_password": False}
    assert accounts[0]["values"]["telegram_chat_id"] == 4242
    assert FAMILY_SECRET not in listed.text and "jmap-password-SECRET" not in listed.text
    one = await client.get("/api/accounts/family", headers=admin)
    assert one.status_code == 200 and one.json() == family
    raw = await redis_client.get(AccountKeys("family").config)
    assert raw.startswith("v1:") and FAMILY_SECRET not in raw


async def test_creating_an_account_answers_each_refusal_as_the_contract_says(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    """Catches a create that is not 409 before a business configuration exists or for a
    taken id, or not 422 with `x-config-error` for a bad id or an invalid account wire."""
    admin = await login(client)
    assert_envelope(await client.post("/api/accounts", headers=admin, json=family_wire()),
                    409, "conflict")
    assert (await first_save(client)).status_code == 200
    admin = await login(client)  # first_save signed in anew (one admin session at a time)
    cases = [
        (family_wire(id="Family!"), "ACCOUNT must match"),
        (family_wire(id="x" * 33), "ACCOUNT must match"),
        (family_wire(timezone="Mars/Base"), "TIMEZONE"),
        (family_wire(bot_token="1:x"), "not an account field: bot_token"),
        (family_wire(name=""), "NAME must be"),
        ({k: v for k, v in family_wire().items() if k != "jmap_username"},
         "missing or blank JMAP_USERNAME"),
        (family_wire(jmap_session_url="http://mail.example.com/"), "JMAP_SESSION_URL"),
    ]
    for wire, message in cases:
        answer = await client.post("/api/accounts", headers=admin, json=wire)
        assert_envelope(answer, 422, "invalid_configuration")
        assert message in answer.headers["x-config-error"], (wire, answer.headers)
    assert await redis_client.smembers(keys.ACCOUNTS_INDEX) == set()
    assert (await client.post("/api/accounts", headers=admin, json=family_wire())
            ).status_code == 201
    for taken in ("family", "default"):
        assert_envelope(await client.post("/api/accounts", headers=admin,
                                          json=family_wire(id=taken,
                                                           telegram_chat_id=7,
                                                           chat_allowlist=[7])),
                        409, "conflict")


async def test_a_chat_belongs_to_one_account(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    """Catches a chat listed by two accounts: on create, on an account's PUT and on
    `PUT /api/business-config` for the default account's chats."""
    admin = await with_family(client)
    answer = await client.post("/api/accounts", headers=admin,
                               json=family_wire(id="work", chat_allowlist=[6000, 4242],
                                                telegram_chat_id=6000))
    assert_envelope(answer, 422, "invalid_configuration")
    assert answer.headers["x-config-error"] == \
        "CHAT_ALLOWLIST: chat 4242 belongs to account default"
    answer = await client.put("/api/accounts/family", headers=admin,
                              json={"chat_allowlist": [5151, 4242]})
    assert answer.headers["x-config-error"] == \
        "CHAT_ALLOWLIST: chat 4242 belongs to account default"
    before = await snapshot(redis_client)
    answer = await client.put("/api/business-config", headers=admin,
                              json={"chat_allowlist": [4242, 5152]})
    assert_envelope(answer, 422, "invalid_configuration")
    assert answer.headers["x-config-error"] == \
        "CHAT_ALLOWLIST: chat 5152 belongs to account family"
    assert await snapshot(redis_client) == before
    fine = await client.put("/api/business-config", headers=admin,
                            json={"chat_allowlist": [4242, 4243]})
    assert fine.status_code == 200, fine.text


async def test_put_merges_a_partial_account_wire_and_checks_the_revision(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    """Catches a PUT that loses the stored fields (a secret included), ignores a stale
    revision, or writes the default account anywhere but the business configuration."""
    admin = await with_family(client)
    saved = await client.put("/api/accounts/family", headers=admin,
                             json={"jmap_username": "carol", "name": "Our family",
                                   "revision": 1})
    assert saved.status_code == 200, saved.text
    assert saved.json()["revision"] == 2 and saved.json()["runtime_applied"] is True
    family = (await client.get("/api/accounts/family", headers=admin)).json()
    assert family["name"] == "Our family" and family["values"]["jmap_username"] == "carol"
    assert family["values"]["timezone"] == "Europe/Berlin"
    assert family["secrets_present"]["jmap_password"] is True
    assert_envelope(await client.put("/api/accounts/family", headers=admin,
                                     json={"jmap_username": "dave", "revision": 1}),
                    409, "conflict")
    assert_envelope(await client.put("/api/accounts/family", headers=admin,
                                     json={"worker_token": "x" * 40}),
                    422, "invalid_configuration")

    default = await client.put("/api/accounts/default", headers=admin,
                               json={"timezone": "Europe/Paris", "name": "Alice"})
    assert default.status_code == 200, default.text
    assert default.json()["revision"] == 2  # the business configuration's revision
    assert (await stored_wire(redis_client))["timezone"] == "Europe/Paris"
    shown = (await client.get("/api/accounts/default", headers=admin)).json()
    assert shown["name"] == "Alice" and shown["revision"] == 2


async def test_an_unknown_account_is_404_on_every_account_route(
    client: httpx.AsyncClient,
) -> None:
    """Catches an `/api/accounts/{id}…` route that answers an unknown id other than 404."""
    admin = await with_family(client)
    for method, path, body in [
        ("GET", "/api/accounts/nobody", None), ("PUT", "/api/accounts/nobody", {"name": "x"}),
        ("DELETE", "/api/accounts/nobody", None),
        ("PUT", "/api/accounts/nobody/enabled", {"enabled": False}),
        ("GET", "/api/accounts/nobody/status", None),
        ("POST", "/api/accounts/nobody/owner-key", None),
        ("GET", "/api/accounts/NOT%20AN%20ID", None),
    ]:
        answer = await client.request(method, path, headers=admin, json=body)
        assert_envelope(answer, 404, "not_found")


async def test_deleting_an_account_removes_its_keys_and_frees_its_chats(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    """Catches a DELETE that leaves the account's keys behind, keeps it listed, keeps its
    chats taken, or deletes `default`."""
    admin = await with_family(client)
    assert (await client.post("/api/accounts/family/owner-key", headers=admin)
            ).status_code == 200
    assert await all_keys(redis_client, "a:{family}:*")
    assert_envelope(await client.delete("/api/accounts/default", headers=admin),
                    409, "conflict")
    deleted = await client.delete("/api/accounts/family", headers=admin)
    assert deleted.status_code == 204
    # Only the marker that refuses the id until its sweep ends (reference §1.12).
    assert await all_keys(redis_client, "a:{family}:*") == [AccountKeys("family").deleted]
    assert await redis_client.smembers(keys.ACCOUNTS_INDEX) == set()
    assert [a["id"] for a in (await client.get("/api/accounts", headers=admin)
                              ).json()["accounts"]] == ["default"]
    assert_envelope(await client.get("/api/accounts/family", headers=admin), 404, "not_found")
    freed = await client.put("/api/business-config", headers=admin,
                             json={"chat_allowlist": [4242, 5152]})
    assert freed.status_code == 200, freed.text


async def test_pausing_an_account_is_stored_and_shown(client: httpx.AsyncClient) -> None:
    """Catches `PUT …/enabled` answering other than `{enabled}`, not being read back, taking a
    non-boolean, or a paused account's status probing its mail server."""
    admin = await with_family(client)
    paused = await client.put("/api/accounts/family/enabled", headers=admin,
                              json={"enabled": False})
    assert paused.status_code == 200 and paused.json() == {"enabled": False}
    assert (await client.get("/api/accounts/family", headers=admin)).json()["enabled"] is False
    status = (await client.get("/api/accounts/family/status", headers=admin)).json()
    assert status["enabled"] is False and status["mail"] == "fail: paused"
    assert_envelope(await client.put("/api/accounts/family/enabled", headers=admin,
                                     json={"enabled": "no"}), 422, "invalid_configuration")
    resumed = await client.put("/api/accounts/default/enabled", headers=admin,
                               json={"enabled": True})
    assert resumed.json() == {"enabled": True}


async def test_status_reports_the_mail_check_and_the_queue(client: httpx.AsyncClient) -> None:
    """Catches a status without the fields of SPEC G.3, or one that calls an unreachable
    mail server `ok`."""
    admin = await with_family(client)
    for account in ("default", "family"):
        answer = await client.get(f"/api/accounts/{account}/status", headers=admin)
        assert answer.status_code == 200, answer.text
        status = answer.json()
        assert set(status) == {"id", "enabled", "mail", "push", "waiting", "dlq",
                               "last_notified_at"}
        assert status["id"] == account and status["enabled"] is True
        assert status["mail"] == "fail: refused"  # a closed port
        assert status["waiting"] == 0 and status["dlq"] == 0
        assert status["last_notified_at"] is None
    assert status["push"] == "off"  # `family`: its push is not held yet (reference §7.16)


async def test_the_account_routes_take_no_other_credential(client: httpx.AsyncClient) -> None:
    """Catches an account route opened by the worker token or the admin key itself (403), or
    answering without a credential (401)."""
    await with_family(client)
    wire = sample_wire()
    for token, status, code in [(wire["worker_token"], 403, "forbidden"),
                                (ADMIN_KEY, 403, "forbidden"), (None, 401, "unauthorized")]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        for method, path in [("GET", "/api/accounts"), ("POST", "/api/accounts"),
                             ("GET", "/api/accounts/family"),
                             ("POST", "/api/accounts/family/owner-key"),
                             ("POST", "/api/owner/session")]:
            answer = await client.request(method, path, headers=headers, json={})
            assert_envelope(answer, status, code)
