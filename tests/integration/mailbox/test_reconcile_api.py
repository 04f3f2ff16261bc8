"""`POST /reconcile`, the built-in scheduler and StateChange pushes, through the real app, with
a real Redis and the real Cyrus JMAP server."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.store import keys
from messageweave.store.catchup import request_catchup
from tests.helpers import (
    RECONCILE_AUTH,
    RECONCILE_TOKEN,
    FreshUser,
    assert_envelope,
    closed_port,
    configure,
    enqueued,
    eventually,
    mailbox_wire,
    state_change,
    wait_enqueued,
)
from tests.integration.mailbox.push_server import (
    PUSH,
    register_for_test,
)
from tests.peers.cyrus import CyrusServer

JSON = {"Content-Type": "application/json"}


# ------------------------------------------------------------------------------ /reconcile


async def test_reconcile_enqueues_new_mail_and_answers_204(
    app: httpx.AsyncClient, cyrus: CyrusServer, mailbox: FreshUser, redis_client: aioredis.Redis
) -> None:
    cyrus.append(user=mailbox.user, subject="already there", received_at=time.time() - 3600)
    first = await app.post("/reconcile", headers=RECONCILE_AUTH)
    assert first.status_code == 204 and first.content == b""
    new = cyrus.append(user=mailbox.user, subject="new mail")
    again = await app.post("/reconcile", headers=RECONCILE_AUTH, content=b"ignored")
    assert again.status_code == 204
    assert await enqueued(redis_client) == [new.email_id]


async def test_reconcile_needs_the_reconcile_token(app: httpx.AsyncClient) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"},
                    {"Authorization": f"bearer {RECONCILE_TOKEN}"}):
        assert_envelope(await app.post("/reconcile", headers=headers), 401, "unauthorized")
    assert_envelope(await app.post("/reconcile", headers={
        "Authorization": "Bearer worker-token-SECRET"}), 403, "forbidden")


async def test_reconcile_is_refused_while_the_service_is_off_after_auth(
    client: httpx.AsyncClient, cyrus: CyrusServer, mailbox: FreshUser,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(cyrus.ca_file))
    await configure(client, mailbox_wire(cyrus, mailbox), enabled=False)
    assert_envelope(await client.post("/reconcile"), 401, "unauthorized")
    assert_envelope(await client.post("/reconcile", headers=RECONCILE_AUTH), 503,
                    "service_unavailable")


async def test_two_concurrent_reconciles_get_one_409(
    app: httpx.AsyncClient, cyrus: CyrusServer, mailbox: FreshUser, redis_client: aioredis.Redis
) -> None:
    await app.post("/reconcile", headers=RECONCILE_AUTH)
    for i in range(5):
        cyrus.append(user=mailbox.user, subject=f"concurrent {i}")
    responses = await asyncio.gather(app.post("/reconcile", headers=RECONCILE_AUTH),
                                     app.post("/reconcile", headers=RECONCILE_AUTH))
    assert sorted(r.status_code for r in responses) == [204, 409]
    [refused] = [r for r in responses if r.status_code == 409]
    assert_envelope(refused, 409, "conflict")
    assert "retry-after" not in refused.headers
    assert len(await enqueued(redis_client)) == 5


async def test_jmap_server_down_is_503_reconcile_retry_and_the_cursor_stays(
    client: httpx.AsyncClient, cyrus: CyrusServer, mailbox: FreshUser,
    redis_client: aioredis.Redis,
) -> None:
    await redis_client.set(keys.RECONCILE_CURSOR, "42")
    await configure(client, mailbox_wire(
        cyrus, mailbox, jmap_session_url=f"https://127.0.0.1:{closed_port()}/"))
    response = await client.post("/reconcile", headers=RECONCILE_AUTH)
    assert_envelope(response, 503, "reconcile_retry")
    assert response.headers["retry-after"] == "30"
    assert await redis_client.get(keys.RECONCILE_CURSOR) == "42"
    assert await redis_client.get(keys.RECONCILE_LOCK) is None
    assert await enqueued(redis_client) == []


# ------------------------------------------------------------------------------ scheduler


async def test_the_built_in_schedule_runs_a_pass_without_any_cron(
    client: httpx.AsyncClient, cyrus: CyrusServer, mailbox: FreshUser,
    redis_client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(cyrus.ca_file))
    await configure(client, mailbox_wire(cyrus, mailbox, reconcile_interval_s=10))
    async def passed() -> bool:
        return await redis_client.get(keys.RECONCILE_CURSOR) is not None
    await eventually(passed, "the scheduler's first pass", 3)
    # the slot is claimed for the whole interval: no second instance-wide pass before it ends
    assert 4_000 < await redis_client.pttl(keys.RECONCILE_SCHEDULE) <= 15_000


# ------------------------------------------------------------------------------ StateChange


async def test_a_state_change_push_enqueues_new_mail_within_a_second(
    app: httpx.AsyncClient, cyrus: CyrusServer, mailbox: FreshUser, redis_client: aioredis.Redis
) -> None:
    assert (await app.post("/reconcile", headers=RECONCILE_AUTH)).status_code == 204
    path = await register_for_test(redis_client)
    new = cyrus.append(user=mailbox.user, subject="pushed")
    account = mailbox.client.account_id
    burst = [app.post(path, json=state_change(account)) for _ in range(10)]
    assert {r.status_code for r in await asyncio.gather(*burst)} == {204}
    await wait_enqueued(redis_client, new.email_id, within_s=1.0)
    assert await enqueued(redis_client) == [new.email_id]


async def test_catch_ups_coalesce_into_one_pending_flag(redis_client: aioredis.Redis) -> None:
    assert await request_catchup(redis_client, "acct") is True
    assert await request_catchup(redis_client, "acct") is False
    assert await redis_client.ttl(keys.reconcile_catchup("acct")) > 0


async def acted_on(redis: aioredis.Redis) -> bool:
    """Whether a StateChange was acted on: its arrival recorded or a catch-up scheduled."""
    return bool(await redis.get(keys.PUSH_LAST_STATE_CHANGE)
                or await redis.keys("a:{default}:reconcile:catchup:*"))


async def test_a_state_change_without_a_registration_is_ignored_and_schedules_nothing(
    app: httpx.AsyncClient, mailbox: FreshUser, redis_client: aioredis.Redis
) -> None:
    """Bug caught (issue #12): answering 401 here and 204 once registered told anyone whether
    push was registered. Since issue #23 a post without the callback token is 401 whether or
    not push is registered (no token matches when nothing is), and acts on nothing."""
    response = await app.post(PUSH, json=state_change(mailbox.client.account_id))
    assert_envelope(response, 401, "unauthorized")
    assert not await acted_on(redis_client)


async def test_a_state_change_for_another_account_is_ignored_and_schedules_nothing(
    app: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    """Bug caught (issue #12): 403 for another account and 204 for ours was an oracle for the
    account id; it is ignored, and answered like ours."""
    path = await register_for_test(redis_client)
    response = await app.post(path, json=state_change("someone-else"))
    assert response.status_code == 204 and response.content == b""
    assert not await acted_on(redis_client)


async def test_a_state_change_without_email_changes_schedules_nothing(
    app: httpx.AsyncClient, mailbox: FreshUser, redis_client: aioredis.Redis
) -> None:
    path = await register_for_test(redis_client)
    response = await app.post(
        path, json=state_change(mailbox.client.account_id, {"Mailbox": "m9"}))
    assert response.status_code == 204
    assert await redis_client.keys("a:{default}:reconcile:catchup:*") == []


@pytest.mark.parametrize("body", [
    b"not json", b"[]", b'{"@type":"Nope"}', b"{}",
    json.dumps({"@type": "StateChange", "changed": {"a": "Email"}}).encode(),
    json.dumps({"@type": "StateChange"}).encode(),
    json.dumps({"@type": "PushVerification", "pushSubscriptionId": "P1"}).encode(),
])
async def test_malformed_push_bodies_are_400_and_enqueue_nothing(
    app: httpx.AsyncClient, redis_client: aioredis.Redis, body: bytes
) -> None:
    path = await register_for_test(redis_client)
    assert_envelope(await app.post(path, content=body, headers=JSON), 400, "invalid_request")
    assert await redis_client.keys("a:{default}:reconcile:catchup:*") == []
    assert await enqueued(redis_client) == []


async def test_a_huge_push_body_is_413(app: httpx.AsyncClient, redis_client: aioredis.Redis
                                       ) -> None:
    path = await register_for_test(redis_client)
    body = json.dumps({"@type": "StateChange", "changed": {}, "pad": "x" * 100_000})
    assert_envelope(await app.post(path, content=body, headers=JSON), 413, "payload_too_large")


async def test_a_state_change_while_the_service_is_off_is_ignored_and_tells_nothing(
    client: httpx.AsyncClient, cyrus: CyrusServer, mailbox: FreshUser,
    redis_client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Bug caught (issue #12): 401 unregistered, 503 registered while off: the answer told an
    unauthenticated caller whether push was registered and whether the switch was on."""
    monkeypatch.setenv("SSL_CERT_FILE", str(cyrus.ca_file))
    await configure(client, mailbox_wire(cyrus, mailbox), enabled=False)
    body = state_change(mailbox.client.account_id)
    assert (await client.post(PUSH, json=body)).status_code == 401  # nothing registered
    path = await register_for_test(redis_client)
    assert (await client.post(path, json=body)).status_code == 204
    assert not await acted_on(redis_client)
