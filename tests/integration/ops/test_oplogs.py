"""The audit log (admin actions) and the send log (delivery attempts), through their API."""

from __future__ import annotations

import time

import httpx
import redis.asyncio as aioredis

from messageweave.ops.sendlog import record_send
from messageweave.store import keys
from messageweave.store.oplog import send_log
from tests.helpers import admin_headers, assert_envelope, login, sample_wire


async def _audit(client: httpx.AsyncClient, headers: dict[str, str]) -> list[dict[str, object]]:
    response = await client.get("/api/logs/audit", headers=headers)
    assert response.status_code == 200, response.text
    records: list[dict[str, object]] = response.json()["records"]
    return records


async def test_admin_actions_are_audited_newest_first_without_secrets(
    client: httpx.AsyncClient,
) -> None:
    session = await login(client)
    wire = sample_wire()
    assert (await client.put("/api/business-config", headers=session,
                             json=wire)).status_code == 200
    patch = {"bot_token": "123456:new-bot-SECRET", "timezone": "Etc/UTC", "revision": 1}
    assert (await client.put("/api/business-config", headers=session,
                             json=patch)).status_code == 200
    assert (await client.put("/api/enabled", headers=session,
                             json={"enabled": True})).status_code == 200
    outbound = {"jmap_timeout_ms": 2000, "telegram_timeout_ms": 3000, "llm_timeout_ms": 4000,
                "max_retries": 1}
    assert (await client.put("/api/config", headers=session, json=outbound)).status_code == 200
    records = await _audit(client, session)
    assert [r["action"] for r in records] == [
        "outbound_changed", "enabled_changed", "config_saved", "config_saved", "session_created"]
    assert records[0] | outbound == records[0]
    assert records[1]["enabled"] is True
    assert records[2]["fields"] == ["bot_token", "timezone"] and records[2]["revision"] == 2
    assert records[3]["fields"] == sorted(wire) and records[3]["revision"] == 1
    assert all(len(str(r["request_id"])) == 32 for r in records)
    raw = (await client.get("/api/logs/audit", headers=session)).text
    for secret in ("123456:new-bot-SECRET", *(str(wire[k]) for k in (
            "bot_token", "jmap_password", "telegram_webhook_secret", "reconcile_token",
            "worker_token"))):
        assert secret not in raw
    assert session["Authorization"][len("Bearer "):] not in raw


async def test_revoking_the_session_is_audited_and_the_worker_token_cannot_read_it(
    client: httpx.AsyncClient,
) -> None:
    session = await login(client)
    await client.put("/api/business-config", headers=session, json=sample_wire())
    assert (await client.post("/api/admin/session/revoke", headers=session)).status_code == 204
    worker = {"Authorization": "Bearer worker-token-SECRET"}
    assert_envelope(await client.get("/api/logs/audit", headers=worker), 403, "forbidden")
    assert [r["action"] for r in await _audit(client, await login(client))][:2] == [
        "session_created", "session_revoked"]


async def test_bootstrap_is_audited(client: httpx.AsyncClient) -> None:
    assert (await client.post("/api/bootstrap", headers=admin_headers(),
                              json=sample_wire())).status_code == 200
    records = await _audit(client, await login(client))
    assert records[1]["action"] == "config_bootstrapped" and records[1]["revision"] == 1


async def test_logs_need_config_authorization(client: httpx.AsyncClient) -> None:
    for path in ("/api/logs/audit", "/api/logs/send"):
        assert_envelope(await client.get(path), 401, "unauthorized")
        assert_envelope(await client.get(path, headers=admin_headers()), 403, "forbidden")


async def _record(redis: aioredis.Redis, n: int, outcome: str) -> None:
    await record_send(redis, stream=keys.STREAM_JMAP, event_id=f"{n}-0", kind="new_mail",
                      chat_id=4242, outcome=outcome,
                      failure_class=None if outcome == "delivered" else "transient",
                      latency_ms=12.345, message_ids=[n] if outcome == "delivered" else [])


async def test_send_log_pages_newest_first_and_filters_by_outcome(
    client: httpx.AsyncClient, redis_client: aioredis.Redis,
) -> None:
    for n in range(7):
        await _record(redis_client, n, "delivered" if n % 2 == 0 else "retry")
    session = await login(client)
    first = (await client.get("/api/logs/send", headers=session, params={"limit": 3})).json()
    assert [r["event_id"] for r in first["records"]] == ["6-0", "5-0", "4-0"]
    second = (await client.get("/api/logs/send", headers=session,
                               params={"limit": 3, "before": first["next_before"]})).json()
    assert [r["event_id"] for r in second["records"]] == ["3-0", "2-0", "1-0"]
    record = first["records"][0]
    assert record | {"stream": "stalwart:jmap", "kind": "new_mail", "chat_id": 4242,
                     "outcome": "delivered", "failure_class": None, "latency_ms": 12.3,
                     "message_ids": [6]} == record
    assert record["time"].endswith("Z")
    retries = (await client.get("/api/logs/send", headers=session,
                                params={"outcome": "retry"})).json()
    assert [r["event_id"] for r in retries["records"]] == ["5-0", "3-0", "1-0"]
    assert all(r["failure_class"] == "transient" for r in retries["records"])
    assert retries["next_before"] is None


async def test_bad_paging_parameters_are_400(client: httpx.AsyncClient) -> None:
    session = await login(client)
    for params in ({"limit": "0"}, {"limit": "201"}, {"limit": "x"}, {"before": "yesterday"}):
        assert_envelope(await client.get("/api/logs/send", headers=session, params=params),
                        400, "invalid_request")


async def test_records_older_than_the_retention_are_trimmed(
    redis_client: aioredis.Redis,
) -> None:
    now_ms = int(time.time() * 1000)
    expired = now_ms - keys.SEND_LOG_RETENTION_S * 1000 - 60_000
    kept = now_ms - keys.SEND_LOG_RETENTION_S * 1000 + 60_000
    for ms in (expired - 1, expired, kept):
        await redis_client.xadd(keys.SEND_LOG, {"r": "{}"}, id=f"{ms}-0")
    await send_log(redis_client).append({"outcome": "delivered"})
    ids = [entry_id for entry_id, _ in await redis_client.xrange(keys.SEND_LOG)]
    assert ids[0] == f"{kept}-0" and len(ids) == 2
