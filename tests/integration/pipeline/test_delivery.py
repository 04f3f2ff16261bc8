"""Mail events and Telegram updates become Telegram messages, through the real worker, Cyrus and
the Bot API emulator."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os

from messageweave.store import keys
from tests.helpers import (
    ADMIN_KEY,
    all_keys,
    assert_envelope,
    console_script,
    eventually,
    subject_of,
)
from tests.served import ServedApp

SECRET = {"X-Telegram-Bot-Api-Secret-Token": "webhook-secret-SECRET"}


async def test_new_mail_becomes_the_three_line_notification_within_a_second(
    pipeline: ServedApp,
) -> None:
    received = dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.UTC)  # 1700000000
    email_id = pipeline.append("Quarterly report", sender="Ann Lee <ann@example.org>",
                               received_at=received)
    await pipeline.enqueue_mail(email_id)
    sent = await pipeline.emulator.wait_for_messages(pipeline.token, pipeline.chat, 1, 2.0)
    assert [m.text for m in sent] == [
        "From: Ann Lee <ann@example.org>\nSubject: Quarterly report\n"
        "Received: 2023-11-15 07:13 (Asia/Tokyo)"
    ]
    assert sent[0].parse_mode is None
    await eventually(lambda: _committed(pipeline), "the delivery committed")


async def test_the_notifications_time_names_the_configured_zone(pipeline: ServedApp) -> None:
    """Catches (issue #34) a time in the chat without its zone: the notification said
    `Received: 2023-07-01 14:05` in the configured zone while the page showed UTC, and nothing
    told the owner which. A zone saved on the page is the one named, summer time applied."""
    await pipeline.configure(timezone="Europe/Berlin", bot_language="en")
    received = dt.datetime(2023, 7, 1, 12, 5, tzinfo=dt.UTC)  # 14:05 in Berlin (CEST)
    email_id = pipeline.append("Zone label", received_at=received)
    await pipeline.enqueue_mail(email_id)
    [sent] = await pipeline.emulator.wait_for_messages(pipeline.token, pipeline.chat, 1, 5.0)
    assert sent.text.split("\n")[2] == "Received: 2023-07-01 14:05 (Europe/Berlin)"


async def _committed(pipeline: ServedApp) -> bool:
    status = (await pipeline.client.get("/api/delivery", headers=pipeline.admin)).json()
    jmap = status["streams"]["stalwart:jmap"]
    return bool(jmap["pending"] == 0)


async def test_mail_without_subject_or_text_body_still_notifies(pipeline: ServedApp) -> None:
    email_id = pipeline.append("", body="")
    await pipeline.enqueue_mail(email_id)
    sent = await pipeline.emulator.wait_for_messages(pipeline.token, pipeline.chat, 1, 3.0)
    assert len(sent) == 1
    lines = sent[0].text.split("\n")
    assert lines[0].startswith("From: ") and lines[1] == "Subject: (no subject)"
    assert lines[2].startswith("Received: 20")


async def test_mail_that_no_longer_exists_goes_to_the_dlq_as_not_found(
    pipeline: ServedApp,
) -> None:
    entry = await pipeline.enqueue_mail("Mdoesnotexist0000000000000")
    auth = pipeline.admin

    async def dead() -> bool:
        body = (await pipeline.client.get("/api/dlq?stream=stalwart:jmap", headers=auth)).json()
        return len(body["entries"]) == 1

    await eventually(dead, "the entry dead-lettered", 5)
    body = (await pipeline.client.get("/api/dlq?stream=stalwart:jmap", headers=auth)).json()
    [row] = body["entries"]
    assert row["stream"] == "stalwart:jmap" and row["failure_class"] == "not_found"
    assert row["attempts"] == 1 and row["reason"] == "email not found"
    assert await pipeline.emulator.sent_messages(pipeline.token, pipeline.chat) == []
    status = (await pipeline.client.get("/api/delivery", headers=auth)).json()
    assert status["streams"]["stalwart:jmap"]["dlq"] == 1
    assert status["streams"]["stalwart:jmap"]["pending"] == 0
    # The dead letter is the entry's terminal record: a stale batch can never send it again.
    record = json.loads(await pipeline.redis.get(keys.delivery_committed(keys.STREAM_JMAP, entry)))
    assert record["state"] == "dead_letter" and record["failure_class"] == "not_found"
    assert record["dlq_id"] == row["id"]

    # Replayed, it runs again (and, still missing, lands in the DLQ again).
    replay = await pipeline.client.post("/api/dlq/replay", headers=auth,
                                        json={"stream": "stalwart:jmap"})
    assert replay.json() == {"replayed": 1}
    await eventually(dead, "the entry dead-lettered", 5)
    again = (await pipeline.client.get("/api/dlq", headers=auth)).json()["entries"]
    assert again[0]["id"] != row["id"]


async def test_help_from_the_owner_is_answered_through_the_webhook(pipeline: ServedApp) -> None:
    update = {"update_id": 900001, "message": {"message_id": 1, "date": 0, "text": "/help",
                                               "chat": {"id": pipeline.chat, "type": "private"}}}
    response = await pipeline.client.post("/webhook/tg", headers=SECRET, json=update)
    assert response.status_code == 204, response.text
    again = await pipeline.client.post("/webhook/tg", headers=SECRET, json=update)
    assert again.status_code == 204  # a Telegram redelivery: accepted, not queued twice
    sent = await pipeline.emulator.wait_for_messages(pipeline.token, pipeline.chat, 1, 3.0)
    assert len(sent) == 1 and sent[0].text.startswith("使用说明")

    async def forgotten() -> bool:  # the answered entry is deleted (issue #12)
        return await pipeline.redis.xlen(keys.STREAM_TELEGRAM) == 0

    await eventually(forgotten, "the entry forgotten", 3)
    assert await pipeline.redis.exists(keys.dedup_tg(900001))


async def test_updates_without_text_are_acknowledged_without_a_reply(pipeline: ServedApp) -> None:
    for update in ({"update_id": 900002},
                   {"update_id": 900003, "message": {"chat": {"id": pipeline.chat},
                                                     "sticker": {"file_id": "x"}}}):
        assert (await pipeline.client.post("/webhook/tg", headers=SECRET,
                                           json=update)).status_code == 204

    async def drained() -> bool:
        info = await pipeline.redis.xpending(keys.STREAM_TELEGRAM, keys.CONSUMER_GROUP)
        return bool(info["pending"] == 0) and await pipeline.redis.xlen(keys.STREAM_TELEGRAM) == 0

    await eventually(drained, "the stream drained", 3)
    assert await pipeline.emulator.sent_messages(pipeline.token) == []


async def test_webhook_refuses_bad_secret_bad_body_and_foreign_chats(pipeline: ServedApp) -> None:
    client = pipeline.client
    ok = {"update_id": 1}
    assert_envelope(await client.post("/webhook/tg", json=ok), 401, "unauthorized")
    assert_envelope(await client.post("/webhook/tg", json=ok,
                                      headers={"X-Telegram-Bot-Api-Secret-Token": "nope"}),
                    401, "unauthorized")
    for bad in (b"not json", b"[]", b'{"update_id":"1"}', b'{"update_id":true}',
                b'{"update_id":1,"message":{"chat":{}}}'):
        assert_envelope(await client.post("/webhook/tg", content=bad, headers=SECRET),
                        400, "invalid_request")
    foreign = {"update_id": 5, "message": {"chat": {"id": 999}, "text": "hi"}}
    refused = await client.post("/webhook/tg", json=foreign, headers=SECRET)
    assert refused.status_code == 204 and refused.content == b""  # issue #23, finding 5
    assert await pipeline.redis.xlen(keys.STREAM_TELEGRAM) == 0
    assert not await pipeline.redis.exists(keys.dedup_tg(5))


async def test_disabled_service_answers_503_only_after_authentication(
    pipeline: ServedApp,
) -> None:
    await pipeline.redis.set(keys.ENABLED, "0")
    client = pipeline.client
    assert_envelope(await client.post("/webhook/tg", json={"update_id": 1}), 401,
                    "unauthorized")
    assert_envelope(await client.post("/webhook/tg", json={"update_id": 1}, headers=SECRET),
                    503, "service_unavailable")
    assert_envelope(await client.post("/worker"), 401, "unauthorized")
    worker = {"Authorization": "Bearer worker-token-SECRET"}
    assert_envelope(await client.post("/worker", headers=worker), 503, "service_unavailable")


async def test_worker_endpoint_drains_and_validates_its_body(cron_only: ServedApp) -> None:
    """`POST /worker` delivers what is queued before it answers. Issue #11: this test used to
    pass with the route's `drain_once()` call deleted, because the continuous worker delivered
    instead; `cron_only` runs no other worker, so only the request can have sent these."""
    auth = {"Authorization": "Bearer worker-token-SECRET"}
    client = cron_only.client
    for bad in (b"nope", b'{"batch":-1}', b'{"batch":"3"}', b"[1]"):
        assert_envelope(await client.post("/worker", content=bad, headers=auth),
                        400, "invalid_request")
    # an admin session is a credential of the wrong kind here (issue #12: least privilege)
    assert_envelope(await client.post("/worker", headers=cron_only.admin), 403, "forbidden")
    for n in range(3):
        await cron_only.enqueue_mail(cron_only.append(f"cron {n}"))

    response = await client.post("/worker", headers=auth)
    assert response.status_code == 204, response.text
    sent = await cron_only.emulator.sent_messages(cron_only.token, cron_only.chat)
    assert [subject_of(m.text) for m in sent] == ["cron 0", "cron 1", "cron 2"]
    info = await cron_only.redis.xpending(keys.STREAM_JMAP, keys.CONSUMER_GROUP)
    assert info["pending"] == 0
    for body in (b"", b"{}", b'{"batch":0}', b'{"batch":50}'):
        response = await client.post("/worker", content=body, headers=auth)
        assert response.status_code == 204, response.text
    assert len(await cron_only.emulator.sent_messages(cron_only.token, cron_only.chat)) == 3


async def test_worker_endpoint_drains_at_most_batch_entries_in_order(cron_only: ServedApp) -> None:
    """`{"batch": n}` bounds one request to n new entries per stream, in stream order (issue
    #11: nothing proved the route drained at all, let alone how much)."""
    auth = {"Authorization": "Bearer worker-token-SECRET"}
    for n in range(12):
        await cron_only.enqueue_mail(cron_only.append(f"batch {n:02d}"))
    response = await cron_only.client.post("/worker", headers=auth, json={"batch": 5})
    assert response.status_code == 204, response.text
    sent = await cron_only.emulator.sent_messages(cron_only.token, cron_only.chat)
    assert [subject_of(m.text) for m in sent] == [f"batch {n:02d}" for n in range(5)]
    response = await cron_only.client.post("/worker", headers=auth)  # 10 at most
    assert response.status_code == 204, response.text
    sent = await cron_only.emulator.sent_messages(cron_only.token, cron_only.chat)
    assert [subject_of(m.text) for m in sent] == [f"batch {n:02d}" for n in range(12)]


async def test_drain_once_command_delivers_and_reports_outcomes(
    cron_only: ServedApp, embedded_redis_url: str,
) -> None:
    """`messageweave drain --once` delivers a batch on its own and prints what it did (the
    third delivery path, fenced like the others)."""
    for n in range(2):
        await cron_only.enqueue_mail(cron_only.append(f"once {n}"))
    env = {**os.environ, "REDIS_URL": embedded_redis_url, "CONFIG_ENCRYPTION_KEY": ADMIN_KEY,
           "SSL_CERT_FILE": str(cron_only.cyrus.ca_file)}
    done = await asyncio.create_subprocess_exec(
        console_script("messageweave"), "drain", "--once", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    out, _ = await asyncio.wait_for(done.communicate(), 60)
    assert done.returncode == 0
    assert json.loads(out.decode().strip().splitlines()[-1]) == {
        "processed": 2, "outcomes": {"delivered": 2}}
    sent = await cron_only.emulator.sent_messages(cron_only.token, cron_only.chat)
    assert [subject_of(m.text) for m in sent] == ["once 0", "once 1"]
    # It dropped its heartbeat when done: nothing of it looks alive to the other workers.
    assert await all_keys(cron_only.redis, keys.WORKER_HEARTBEAT_PREFIX + "*") == []

