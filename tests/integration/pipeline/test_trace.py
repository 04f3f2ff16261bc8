""""Where is my mail?" — `GET /api/trace` and `messageweave trace` against the real pipeline:
Cyrus JMAP, the embedded Redis, the running worker and the Telegram Bot API emulator."""

from __future__ import annotations

import json
import secrets
from typing import Any

from messageweave.store import keys
from messageweave.store.reconcile_state import reconcile_lock
from tests.helpers import (
    ADMIN_KEY,
    CYRUS_USER,
    assert_envelope,
    enqueue_mail,
    eventually,
    run_cli,
)
from tests.served import ServedApp

# Outbound settings with one retry, so a failing mail is dead-lettered after two attempts.
ONE_RETRY = {"jmap_timeout_ms": 15000, "telegram_timeout_ms": 10000, "llm_timeout_ms": 30000,
             "max_retries": 1}


async def _discovered(app: ServedApp, subject: str) -> tuple[str, str]:
    """A new mail in Cyrus, claimed and enqueued the way the reconcile does it (the claim names
    its entry); (email id, entry id). A periodic reconcile may claim it first: same claim."""
    email_id = app.append(subject)
    await enqueue_mail(app.redis, CYRUS_USER, email_id)
    entry = await app.redis.get(keys.dedup_jmap(CYRUS_USER, email_id))
    assert entry and entry != "not_notified"
    return email_id, str(entry)


async def _trace(app: ServedApp, q: str) -> dict[str, Any]:
    answer = await app.client.get("/api/trace", params={"q": q}, headers=app.admin)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def _until_status(app: ServedApp, q: str, status: str) -> dict[str, Any]:
    """The trace once the mail's status is `status` and the attempt that put it there is
    recorded: the send log's record follows the ledger's step by one round trip (a clean-clone
    CI run read the dead letter before its attempt)."""
    latest: dict[str, Any] = {}

    async def reached() -> bool:
        nonlocal latest
        latest = await _trace(app, q)
        if not latest["mails"] or latest["mails"][0]["status"] != status:
            return False
        return any(a["outcome"] == status for a in _steps(latest["mails"][0], "attempt"))

    await eventually(reached, "the mail traced as " + status, 15)
    return latest


def _steps(mail: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [s for s in mail["steps"] if s["step"] == name]


async def test_a_delivered_mail_traced_by_id_and_by_subject_shows_its_telegram_message(
    pipeline: ServedApp,
) -> None:
    """Catches a trace that loses the thread between the layers: the claim must lead to the
    stream entry, the send log's attempt and the terminal record, ending with the Telegram
    message id the emulator really assigned — and a subject search must find the same mail."""
    subject = f"Trace me {secrets.token_hex(4)}"
    email_id, entry = await _discovered(pipeline, subject)
    [sent] = await pipeline.emulator.wait_for_messages(pipeline.token, pipeline.chat, 1, 8.0)

    by_id = await _until_status(pipeline, email_id, "delivered")
    assert by_id["by"] == "email_id" and by_id["found"] is True and by_id["jmap"] == "ok"
    [mail] = by_id["mails"]
    assert mail["email_id"] == email_id and mail["subject"] == subject and mail["seen"]
    names = [s["step"] for s in mail["steps"]]
    assert names.index("seen") < names.index("enqueued") < names.index("attempt") \
        < names.index("delivered")
    assert _steps(mail, "enqueued")[0]["entry_id"] == entry
    [attempt] = _steps(mail, "attempt")
    assert attempt["outcome"] == "delivered" and attempt["message_ids"] == [sent.message_id]
    assert _steps(mail, "delivered")[0]["message_ids"] == [sent.message_id]
    assert all(s["at"] and s["at"].endswith("Z") for s in mail["steps"])

    # Cyrus answers a subject filter from its Xapian index: index now rather than race the
    # rolling squatter, which lags behind under load (a clean-clone CI run found 0 matches).
    pipeline.cyrus.index(CYRUS_USER)
    by_subject = await _trace(pipeline, subject.split(" ", 1)[1] + "  ")
    assert by_subject["by"] == "subject"
    assert [m["email_id"] for m in by_subject["mails"]] == [email_id]
    assert by_subject["mails"][0]["steps"] == mail["steps"]


async def test_a_mail_whose_sends_fail_shows_each_retry_and_the_dead_letter(
    pipeline: ServedApp,
) -> None:
    """Catches a trace that shows only the last word: both attempts (a retry, then the dead
    letter) with their failure class and latency, and the dead letter still held in the DLQ
    with its reason, must be there. (`retry_window_s` 0: a 502 counts against `max_retries`,
    issue #22, instead of waiting for Telegram.)"""
    await pipeline.configure(retry_window_s=0)
    saved = await pipeline.client.put("/api/config", headers=pipeline.admin, json=ONE_RETRY)
    assert saved.status_code == 200, saved.text
    await pipeline.emulator.fail(token=pipeline.token, method="sendMessage", error_code=502)
    email_id, _ = await _discovered(pipeline, f"Always failing {secrets.token_hex(4)}")

    [mail] = (await _until_status(pipeline, email_id, "dead_letter"))["mails"]
    attempts = _steps(mail, "attempt")
    assert [a["outcome"] for a in attempts] == ["retry", "dead_letter"]
    assert {a["failure_class"] for a in attempts} == {"transient"}
    assert all(isinstance(a["latency_ms"], int | float) for a in attempts)
    [dead] = _steps(mail, "dead_letter")
    assert dead["attempts"] == 2 and dead["in_dlq"] is True
    assert str(dead["reason"]).startswith("telegram 502")


async def test_a_mail_the_system_never_saw_says_so(pipeline: ServedApp) -> None:
    """Catches a trace that answers an empty list (or a 404) for what it never saw: an id the
    mailbox does not know, and a mail in the mailbox no reconcile reached yet, each say why."""
    unknown = await _trace(pipeline, "Mnosuchmail0000000000000")
    assert unknown["found"] is False and unknown["by"] == "email_id"
    [mail] = unknown["mails"]
    assert mail["status"] == "not_seen" and mail["reason"] == "not_in_mailbox"
    assert mail["steps"] == []

    # Held for the rest of the test, so no reconcile pass (the app's periodic one included)
    # can reach the mail before it is traced.
    holder = reconcile_lock(pipeline.redis)
    # a pass running now ends within its lease
    await eventually(holder.acquire, "the reconcile slot free")
    try:
        pipeline.cyrus.append(subject="Still unread by the reconcile")
        await pipeline.redis.set(keys.RECONCILE_BASELINE, 0)
        email_id = pipeline.append("Never reconciled")
        [fresh] = (await _trace(pipeline, email_id))["mails"]
    finally:
        await holder.release()
    assert fresh["seen"] is False, fresh
    assert fresh["reason"] == "not_seen_yet" and [s["step"] for s in fresh["steps"]] == \
        ["received"]


async def test_the_trace_route_refuses_other_credentials_and_bad_queries(
    pipeline: ServedApp,
) -> None:
    """Catches a trace readable with the worker token or the admin key (it lists the owner's
    subjects and chat message ids), and a query that is empty or unbounded reaching JMAP."""
    client = pipeline.client
    worker = {"Authorization": f"Bearer {pipeline.wire['worker_token']}"}
    admin_key = {"Authorization": f"Bearer {ADMIN_KEY}"}
    assert_envelope(await client.get("/api/trace", params={"q": "x"}), 401, "unauthorized")
    for headers in (worker, admin_key):
        assert_envelope(await client.get("/api/trace", params={"q": "x"}, headers=headers),
                        403, "forbidden")
    for params in ({}, {"q": "   "}, {"q": "a" * 201}):
        assert_envelope(await client.get("/api/trace", params=params, headers=pipeline.admin),
                        400, "invalid_request")


async def test_the_cli_prints_each_step_and_exits_0_found_3_not_found(
    pipeline: ServedApp, embedded_redis_url: str,
) -> None:
    """Catches a command that cannot reach the instance the operator runs, prints no times,
    or exits 0 for a mail that is nowhere (a script could not tell the two apart)."""
    subject = f"Cli trace {secrets.token_hex(4)}"
    email_id, entry = await _discovered(pipeline, subject)
    [sent] = await pipeline.emulator.wait_for_messages(pipeline.token, pipeline.chat, 1, 8.0)
    await _until_status(pipeline, email_id, "delivered")
    env = {"REDIS_URL": embedded_redis_url, "CONFIG_ENCRYPTION_KEY": ADMIN_KEY,
           "SSL_CERT_FILE": str(pipeline.cyrus.ca_file)}

    code, out = await run_cli("trace", email_id, **env)
    assert code == 0, out
    assert f"{email_id} {subject!r}: delivered" in out
    assert f"enqueued on stalwart:jmap as {entry}" in out
    assert f"delivered: Telegram message {sent.message_id}" in out
    step_lines = [line for line in out.splitlines() if line.startswith("  20")]
    assert len(step_lines) >= 4  # received, seen, enqueued, attempt, delivered: each dated

    pipeline.cyrus.index(CYRUS_USER)  # the subject search reads the Xapian index
    code, out = await run_cli("trace", *subject.split(), "--json", **env)
    assert code == 0, out
    assert [m["email_id"] for m in json.loads(out)["mails"]] == [email_id]

    code, out = await run_cli("trace", "no", "such", "subject", secrets.token_hex(4), **env)
    assert code == 3, out
    assert "not found" in out
    code, out = await run_cli("trace", "Mnosuchmail0000000000000", **env)
    assert code == 3 and "not seen: the mailbox has no mail with this id" in out, out
