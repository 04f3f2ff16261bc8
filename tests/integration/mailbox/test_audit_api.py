"""`POST /api/audit`, `GET /api/audit` and the periodic audit, through the real app: Cyrus JMAP,
a real Redis, the real worker and the Telegram Bot API emulator."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave import runtime
from messageweave.mail import gap_audit
from messageweave.mail.reconcile import reconcile
from messageweave.store import keys
from tests.helpers import (
    RECONCILE_AUTH,
    FreshUser,
    assert_envelope,
    closed_port,
    configure,
    eventually,
    every_entry_finished,
    login,
    running_client,
    settings_for,
)
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator
from tests.served import lift_limits, peer_wire

WORKER = {"Authorization": "Bearer worker-token-SECRET"}


@dataclass
class Setup:
    client: httpx.AsyncClient
    redis: aioredis.Redis
    cyrus: CyrusServer
    mailbox: FreshUser
    emulator: TelegramEmulator
    wire: dict[str, Any]

    async def messages(self) -> list[str]:
        sent = await self.emulator.sent_messages(str(self.wire["bot_token"]),
                                                 int(self.wire["telegram_chat_id"]))
        return [m.text for m in sent]

    def append(self, subject: str) -> str:
        return self.cyrus.append(user=self.mailbox.user, subject=subject).email_id


def audit_wire(cyrus: CyrusServer, mailbox: FreshUser, emulator: TelegramEmulator,
               **overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {"jmap_username": mailbox.user, "jmap_password": mailbox.password,
                              "reconcile_interval_s": 0, "audit_interval_s": 0}
    values.update(overrides)
    return peer_wire(cyrus, emulator, **values)


async def rewind_baseline(redis: aioredis.Redis) -> None:
    """receivedAt has a 1 s resolution: mail appended in the second of the first run is not
    audited by design, and these tests append right away."""
    await redis.set(keys.RECONCILE_BASELINE, int(await redis.get(keys.RECONCILE_BASELINE)) - 2)


async def first_run(setup: Setup) -> None:
    assert (await setup.client.post("/reconcile", headers=RECONCILE_AUTH)).status_code == 204
    await rewind_baseline(setup.redis)


async def skip_past(setup: Setup) -> None:
    """Lose discovery: the cursor jumps over everything appended so far."""
    await setup.redis.set(keys.RECONCILE_CURSOR, await setup.mailbox.client.email_state())


async def post_audit(client: httpx.AsyncClient, **kw: Any) -> httpx.Response:
    """With a new admin session unless `headers` are given (a login replaces the session)."""
    if "headers" not in kw:
        kw["headers"] = await login(client)
    return await client.post("/api/audit", **kw)


@pytest.fixture
async def setup(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, cyrus: CyrusServer,
    mailbox: FreshUser, telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> AsyncIterator[Setup]:
    """The app, configured for a fresh Cyrus mailbox and the emulator, switched on, with no
    periodic reconcile or audit (each test triggers them)."""
    await lift_limits(redis_client)
    wire = audit_wire(cyrus, mailbox, telegram_emulator)
    await configure(client, wire, applied=True)
    yield Setup(client, redis_client, cyrus, mailbox, telegram_emulator, wire)


def missing_total(metrics: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith("messageweave_gap_audit_missing_total{"))


# ------------------------------------------------------------------------------ end to end


async def test_a_mail_the_cursor_skipped_reaches_telegram_exactly_once(setup: Setup) -> None:
    """Catches a gap that stays a gap: a mail Email/changes was moved past (never enqueued)
    must reach the chat once through the auditor, and auditing again must not send it twice."""
    await first_run(setup)
    setup.append("Skipped by the cursor")
    await skip_past(setup)
    assert (await setup.client.post("/reconcile", headers=RECONCILE_AUTH)).status_code == 204
    assert (await setup.redis.xlen(keys.STREAM_JMAP)) == 0

    answer = await post_audit(setup.client)
    assert answer.status_code == 200 and answer.json() == {"checked": 1, "missing": 1,
                                                           "enqueued": 1}
    await eventually(lambda: _count(setup, 1), "the message in the chat")
    again = await post_audit(setup.client)
    assert again.json() == {"checked": 1, "missing": 0, "enqueued": 0}
    await every_entry_finished(setup.redis)
    [text] = await setup.messages()
    assert "Subject: Skipped by the cursor" in text


async def _count(setup: Setup, n: int) -> bool:
    return len(await setup.messages()) >= n


async def test_a_mail_whose_entry_was_deleted_before_any_worker_read_it_reaches_telegram_once(
    embedded_redis_url: str, redis_client: aioredis.Redis, cyrus: CyrusServer, mailbox: FreshUser,
    telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> None:
    """Catches trusting the claim: the reconcile enqueued the mail, then its entry was deleted
    while no worker ran; after the restart the auditor must re-enqueue it and it is sent once."""
    await lift_limits(redis_client)
    wire = audit_wire(cyrus, mailbox, telegram_emulator)
    async with running_client(settings_for(embedded_redis_url)) as app:
        await configure(app, wire, applied=True)
        assert (await app.post("/reconcile", headers=RECONCILE_AUTH)).status_code == 204
    await rewind_baseline(redis_client)
    email_id = cyrus.append(user=mailbox.user, subject="Entry deleted while down").email_id
    assert (await reconcile(redis_client, mailbox.client, ["inbox"])).enqueued == 1
    [(entry, _)] = await redis_client.xrange(keys.STREAM_JMAP)
    await redis_client.xdel(keys.STREAM_JMAP, entry)

    async with running_client(settings_for(embedded_redis_url)) as app:
        answer = await post_audit(app)
        assert answer.json() == {"checked": 1, "missing": 1, "enqueued": 1}
        setup = Setup(app, redis_client, cyrus, mailbox, telegram_emulator, wire)
        await eventually(lambda: _count(setup, 1), "the message in the chat")
        assert (await post_audit(app)).json() == {"checked": 1, "missing": 0, "enqueued": 0}
        await every_entry_finished(redis_client)
        [text] = await setup.messages()
    assert "Subject: Entry deleted while down" in text
    [(_, fields)] = await redis_client.xrange(keys.STREAM_JMAP)
    assert fields["email_id"] == email_id


async def test_two_audits_at_once_send_one_message(setup: Setup) -> None:
    """Catches a check-then-enqueue race between two requests (two instances, or a gateway
    failover running the audit twice): one of them enqueues, the mail is sent once."""
    await first_run(setup)
    email_id = setup.append("Audited twice at once")
    await skip_past(setup)
    admin = await login(setup.client)
    answers = await asyncio.gather(post_audit(setup.client, headers=admin),
                                   post_audit(setup.client, headers=admin))
    assert sorted(a.json()["enqueued"] for a in answers) == [0, 1]
    await eventually(lambda: _count(setup, 1), "the message in the chat")
    await every_entry_finished(setup.redis)
    assert len(await setup.messages()) == 1
    rows = await setup.redis.xrange(keys.STREAM_JMAP)
    assert [f["email_id"] for _, f in rows] == [email_id]


async def test_audits_next_to_a_reconcile_pass_send_each_mail_once(setup: Setup) -> None:
    """Catches the auditor and discovery both enqueuing a mail: with lost mail and new mail at
    once, two audits and a reconcile pass side by side leave one entry and one message per
    mail."""
    await first_run(setup)
    lost = [setup.append(f"Lost {i}") for i in range(3)]
    await skip_past(setup)
    fresh = [setup.append(f"Fresh {i}") for i in range(3)]
    admin = await login(setup.client)
    answers = await asyncio.gather(post_audit(setup.client, headers=admin),
                                   post_audit(setup.client, headers=admin),
                                   setup.client.post("/reconcile", headers=RECONCILE_AUTH))
    assert answers[2].status_code == 204
    assert sum(a.json()["enqueued"] for a in answers[:2]) == 3
    await eventually(lambda: _count(setup, 6), "six messages in the chat")
    await every_entry_finished(setup.redis)
    texts = await setup.messages()
    assert sorted(t.split("\n")[1] for t in texts) == sorted(
        f"Subject: {kind} {i}" for kind in ("Lost", "Fresh") for i in range(3))
    rows = await setup.redis.xrange(keys.STREAM_JMAP)
    assert sorted(f["email_id"] for _, f in rows) == sorted(lost + fresh)


# ------------------------------------------------------------------------------ the route


async def test_post_api_audit_needs_config_authorization_and_no_body(setup: Setup) -> None:
    """Catches an operator route open to anyone (or to the reconcile token), and one that
    silently accepts a body it does not read."""
    for headers in ({}, {"Authorization": "Bearer wrong"},
                    {"Authorization": "bearer worker-token-SECRET"}):
        assert_envelope(await setup.client.post("/api/audit", headers=headers), 401,
                        "unauthorized")
    for headers in (RECONCILE_AUTH, WORKER):
        assert_envelope(await setup.client.post("/api/audit", headers=headers), 403, "forbidden")
    for body in (b"{}", b"x", b" ", b'{"window": 60}'):
        assert_envelope(await post_audit(setup.client, content=body), 400, "invalid_request")
    assert_envelope(await post_audit(setup.client, json={}), 400, "invalid_request")
    by_worker = await post_audit(setup.client)
    assert by_worker.status_code == 200
    assert by_worker.json() == {"checked": 0, "missing": 0, "enqueued": 0}
    by_session = await setup.client.post("/api/audit", headers=await login(setup.client))
    assert by_session.status_code == 200 and set(by_session.json()) == {"checked", "missing",
                                                                       "enqueued"}


async def test_missing_mail_moves_the_counter_and_writes_an_audit_record(setup: Setup) -> None:
    """Catches a self-heal nobody hears about: found mail must move
    `messageweave_gap_audit_missing_total` and leave a `gap_audit` audit-log record naming it;
    the result is what `GET /api/audit` shows."""
    admin = await login(setup.client)
    assert (await setup.client.get("/api/audit", headers=admin)).json() == {"last": None}
    before = missing_total((await setup.client.get("/metrics", headers=WORKER)).text)
    await first_run(setup)
    email_id = setup.append("Counted")
    await skip_past(setup)
    assert (await post_audit(setup.client, headers=admin)).json()["missing"] == 1

    metrics = (await setup.client.get("/metrics", headers=WORKER)).text
    assert missing_total(metrics) == before + 1
    assert 'messageweave_gap_audit_missing_total{reason="unclaimed"}' in metrics
    records = (await setup.client.get("/api/logs/audit", headers=admin)).json()["records"]
    newest = records[0]
    assert newest["action"] == "gap_audit" and newest["trigger"] == "api"
    assert (newest["checked"], newest["missing"], newest["enqueued"]) == (1, 1, 1)
    assert newest["email_ids"] == [email_id] and newest["complete"] is True
    last = (await setup.client.get("/api/audit", headers=admin)).json()["last"]
    assert last["trigger"] == "api" and last["ok"] is True
    assert (last["checked"], last["missing"], last["enqueued"]) == (1, 1, 1)
    assert abs(last["at"] - time.time()) < 30


async def test_post_api_audit_is_503_while_the_service_is_off(setup: Setup) -> None:
    """Catches an audit that enqueues while business processing is switched off (and one that
    tells an unauthenticated caller about the switch)."""
    headers = await login(setup.client)
    await setup.client.put("/api/enabled", headers=headers, json={"enabled": False})
    assert_envelope(await setup.client.post("/api/audit"), 401, "unauthorized")
    assert_envelope(await post_audit(setup.client), 503, "service_unavailable")
    assert await setup.redis.get(keys.AUDIT_LAST) is None


async def test_post_api_audit_is_a_retryable_503_when_jmap_is_down(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, cyrus: CyrusServer,
    mailbox: FreshUser, telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> None:
    """Catches a JMAP failure that surfaces as a 500 instead of a retryable 503, and a failed
    run that leaves no trace for the admin page."""
    headers = await login(client)
    wire = audit_wire(cyrus, mailbox, telegram_emulator,
                      jmap_session_url=f"https://127.0.0.1:{closed_port()}/")
    assert (await client.put("/api/business-config", headers=headers, json=wire)).is_success
    assert (await client.put("/api/enabled", headers=headers, json={"enabled": True})).is_success
    await redis_client.set(keys.RECONCILE_CURSOR, "some-state")
    down = await post_audit(client)
    assert_envelope(down, 503, "service_unavailable")
    assert down.headers["retry-after"] == "30"
    last = (await client.get("/api/audit", headers=await login(client))).json()["last"]
    assert last["ok"] is False and last["trigger"] == "api"
    assert last["error"] == "JmapTransportError"


async def another_instance_audits(redis_url: str) -> bool:
    """One tick of the periodic audit, run by another instance on this Redis: what every
    instance's loop does when the slot ends. True when it audited. Calling the tick proves in
    an instant what waiting for the loop's own ticks proved in seconds."""
    async with runtime.running(settings_for(redis_url)) as other:
        audited, _wait = await gap_audit._tick(other)
        return audited


async def test_the_periodic_audit_runs_once_per_interval(
    setup: Setup, embedded_redis_url: str,
) -> None:
    """Catches a loop that never runs or runs again on each tick: one audit per
    `audit_interval_s` cluster-wide (the slot), and the mail it found is delivered once."""
    await first_run(setup)
    setup.append("Found by the schedule")
    await skip_past(setup)
    await configure(setup.client, {**setup.wire, "audit_interval_s": 60}, applied=True)
    # the loop polls every second: it claims the slot and audits at once
    async def audited() -> bool:
        return await setup.redis.get(keys.AUDIT_LAST) is not None
    await eventually(audited, "the periodic audit", 5)
    admin = await login(setup.client)
    last = (await setup.client.get("/api/audit", headers=admin)).json()["last"]
    assert last["trigger"] == "schedule" and last["missing"] == 1
    # half an interval at least (to the slot key's phase): the ticks below find it held
    assert 30_000 <= await setup.redis.pttl(keys.AUDIT_SCHEDULE) <= 90_000
    await eventually(lambda: _count(setup, 1), "the message in the chat")
    for _ in range(3):  # more ticks: the slot holds, nothing runs again
        assert await another_instance_audits(embedded_redis_url) is False
    assert (await setup.client.get("/api/audit", headers=admin)).json()["last"] == last
    assert len(await setup.messages()) == 1


async def test_the_periodic_audit_does_nothing_while_the_service_is_off(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, cyrus: CyrusServer,
    mailbox: FreshUser, telegram_emulator: TelegramEmulator, trust_cyrus: None,
    embedded_redis_url: str,
) -> None:
    """Catches a loop that ignores the switch (it would enqueue notifications while business
    processing is off)."""
    headers = await login(client)
    wire = audit_wire(cyrus, mailbox, telegram_emulator, audit_interval_s=60)
    assert (await client.put("/api/business-config", headers=headers, json=wire)).is_success
    await reconcile(redis_client, mailbox.client, ["inbox"])
    for _ in range(3):  # ticks while off: none claims the slot or audits
        assert await another_instance_audits(embedded_redis_url) is False
    assert await redis_client.get(keys.AUDIT_LAST) is None
    assert await redis_client.get(keys.AUDIT_SCHEDULE) is None
