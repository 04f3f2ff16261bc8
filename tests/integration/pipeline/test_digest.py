"""The backlog digest (issue #16) through the real pipeline: mail appended to a fresh Cyrus
mailbox, found by one reconcile pass, sent by the running worker to the Bot API emulator,
followed by the trace and checked by the gap auditor."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.mail import backlog as backlog_module
from messageweave.mail.jmap import JmapClient
from messageweave.mail.reconcile import Budget, Progress, reconcile
from messageweave.pipeline import routing
from messageweave.store import keys
from messageweave.store.mail_entries import DIGEST_MAX_IDS, enqueue_digest
from tests.helpers import ADMIN_KEY, FreshUser, eventually, run_cli
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import SentMessage, TelegramEmulator
from tests.served import CHAT, ServedApp, served_app

THRESHOLD = 10
TEAM = -1009876543  # a forum supergroup
TOPIC = 7
RECONCILE = {"Authorization": "Bearer reconcile-SECRET"}
INBOX = ("inbox",)


@pytest.fixture
async def digesting(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, cyrus: CyrusServer,
    fresh: FreshUser, telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> AsyncIterator[ServedApp]:
    """The app on a fresh mailbox with `digest_threshold` 10, no periodic reconcile or audit
    (only the passes the test runs), and the reconcile's first run done. The baseline is moved
    back so the mails appended with `received_at` in the last minutes are audited."""
    async with served_app(client, redis_client, cyrus, telegram_emulator,
                          jmap_username=fresh.user, jmap_password=fresh.password,
                          chat_allowlist=[CHAT, TEAM], digest_threshold=THRESHOLD,
                          reconcile_interval_s=0, audit_interval_s=0) as app:
        await reconcile_now(app)
        await app.redis.set(keys.RECONCILE_BASELINE, int(time.time()) - 600)
        yield app


async def reconcile_now(app: ServedApp) -> None:
    """One pass the way cron runs it (`POST /reconcile`: the live configuration's threshold)."""
    assert (await app.client.post("/reconcile", headers=RECONCILE)).status_code == 204


def append_many(app: ServedApp, count: int, prefix: str,
                sender: str = "Bob Example <bob@example.org>") -> list[str]:
    """`count` mails, one second apart (the last is the newest); their email ids."""
    start = time.time() - 300
    return [app.cyrus.append(user=str(app.wire["jmap_username"]), subject=f"{prefix} {n:02d}",
                             sender=sender, received_at=start + n).email_id
            for n in range(count)]


async def entries(app: ServedApp) -> list[tuple[str, dict[str, str]]]:
    return [(str(i), dict(f)) for i, f in await app.redis.xrange(keys.STREAM_JMAP)]


async def finished(app: ServedApp, entry_id: str) -> dict[str, Any]:
    """The entry's terminal record, once the worker wrote it."""
    key = keys.delivery_committed(keys.STREAM_JMAP, entry_id)
    await eventually(lambda: app.redis.exists(key), "the digest key written", 15)
    record: dict[str, Any] = json.loads(await app.redis.get(key))
    return record


async def one_digest(app: ServedApp, email_ids: list[str]) -> str:
    """The only entry on the stream: a digest of exactly `email_ids`; its id, once finished."""
    [(entry_id, fields)] = await entries(app)
    assert fields["kind"] == "digest"
    assert fields["email_ids"].split() == email_ids
    account = str(app.wire["jmap_username"])
    claims = await app.redis.mget([keys.dedup_jmap(account, e) for e in email_ids])
    assert claims == [entry_id] * len(email_ids)  # each mail's claim names the digest entry
    await finished(app, entry_id)
    return entry_id


def flag(params: dict[str, Any], name: str) -> object:
    value = params.get(name)
    return json.loads(value) if isinstance(value, str) else value


async def trace_of(app: ServedApp, email_id: str) -> dict[str, Any]:
    answer = await app.client.get("/api/trace", params={"q": email_id}, headers=app.admin)
    assert answer.status_code == 200, answer.text
    [mail] = answer.json()["mails"]
    return dict(mail)


def step(mail: dict[str, Any], name: str) -> dict[str, Any]:
    [found] = [s for s in mail["steps"] if s["step"] == name]
    return dict(found)


async def test_a_backlog_of_15_found_in_one_pass_is_one_digest_traced_and_not_missing(
    digesting: ServedApp, embedded_redis_url: str,
) -> None:
    """Catches the storm the digest exists for (15 notifications instead of one), a digest that
    loses mails or their order, a trace that cannot say where a digested mail went, and a gap
    auditor that counts digested mails as missing (and sends them one by one after all)."""
    app = digesting
    ids = append_many(app, 15, "Backlog")
    await reconcile_now(app)
    entry_id = await one_digest(app, ids)

    [sent] = await app.emulator.sent_messages(app.token)
    assert sent.chat_id == CHAT
    lines = sent.text.split("\n")
    assert lines[0] == "新邮件汇总：共 15 封"
    assert lines[1:] == [f"Bob Example — Backlog {n:02d}" for n in range(14, -1, -1)]
    assert not flag(sent.params, "disable_notification")
    assert "reply_markup" not in sent.params and "message_thread_id" not in sent.params

    mail = await trace_of(app, ids[3])
    assert mail["status"] == "delivered"
    delivered = step(mail, "delivered")
    assert delivered["entry_id"] == entry_id and delivered["message_ids"] == [sent.message_id]
    assert delivered["digest"] == {"message": 1, "of": 1, "mails": 15, "summary": True}
    code, out = await run_cli("trace", ids[3], REDIS_URL=embedded_redis_url,
                              CONFIG_ENCRYPTION_KEY=ADMIN_KEY,
                              SSL_CERT_FILE=str(app.cyrus.ca_file))
    assert code == 0, out
    assert (f"delivered in digest entry {entry_id}, message 1 of 1 (a digest of 15 mails): "
            f"Telegram message {sent.message_id}") in out

    audit = await app.client.post("/api/audit", headers=app.admin)
    assert audit.status_code == 200, audit.text
    assert audit.json() == {"checked": 15, "missing": 0, "enqueued": 0}
    assert len(await entries(app)) == 1
    assert len(await app.emulator.sent_messages(app.token)) == 1


async def test_a_pass_of_two_mails_notifies_each_on_its_own(digesting: ServedApp) -> None:
    """Catches a digest for a push that brings a mail or two: at or under the threshold every
    mail keeps its own entry and its own notification, with its buttons."""
    app = digesting
    ids = append_many(app, 2, "Just two")
    await reconcile_now(app)
    listed = await entries(app)
    assert [fields for _, fields in listed] == \
        [{"account_id": app.wire["jmap_username"], "email_id": e} for e in ids]
    for entry_id, _ in listed:
        await finished(app, entry_id)
    sent = await app.emulator.sent_messages(app.token, CHAT)
    assert [m.text.split("\n")[1] for m in sent] == ["Subject: Just two 00", "Subject: Just two 01"]
    assert all("reply_markup" in m.params for m in sent)


async def test_25_mails_in_english_list_the_newest_20_and_count_the_rest_silently_at_night(
    digesting: ServedApp, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches a digest that lists a week of mail line by line (past Telegram's limit), speaks
    Chinese to an English bot, or buzzes inside the quiet hours (injected time: 23:30 in the
    configured Asia/Tokyo)."""
    app = digesting
    await app.configure(bot_language="en", quiet_hours={"start": "22:00", "end": "07:00"})
    night = dt.datetime(2026, 3, 2, 23, 30, tzinfo=dt.timezone(dt.timedelta(hours=9)))
    monkeypatch.setattr(routing, "clock", lambda: night)
    ids = append_many(app, 25, "Week away")
    await reconcile_now(app)
    await one_digest(app, ids)

    [sent] = await app.emulator.sent_messages(app.token)
    lines = sent.text.split("\n")
    assert lines[0] == "New mail digest: 25 mails"
    assert lines[1:21] == [f"Bob Example — Week away {n:02d}" for n in range(24, 4, -1)]
    assert lines[21:] == ["… and 5 more"]
    assert flag(sent.params, "disable_notification") is True


async def test_rules_split_a_digest_by_chat_and_topic_and_leave_muted_mail_out(
    digesting: ServedApp,
) -> None:
    """Catches a digest that sends everything to the default chat (ignoring the rules), lumps
    a small group into the digest of another chat, or counts a muted mail; the muted mail ends
    `skipped` with its rule in the trace and is not missing for the gap auditor."""
    app = digesting
    await app.configure(notify_rules=[
        {"name": "newsletters", "subject": "newsletter", "action": "mute"},
        {"name": "team", "from": "@example.net", "chat_id": TEAM, "thread_id": TOPIC,
         "silent": True}])
    team = append_many(app, 12, "Build", sender="CI <ci@example.net>")
    home = append_many(app, 3, "Hello")
    [muted] = append_many(app, 1, "Our newsletter")
    await reconcile_now(app)
    await one_digest(app, team + home + [muted])

    [digest] = await app.emulator.sent_messages(app.token, TEAM)
    lines = digest.text.split("\n")
    assert lines[0] == "新邮件汇总：共 12 封" and len(lines) == 13
    assert flag(digest.params, "message_thread_id") == TOPIC
    assert flag(digest.params, "disable_notification") is True
    at_home: list[SentMessage] = await app.emulator.sent_messages(app.token, CHAT)
    assert [m.text.split("\n")[1] for m in at_home] == [f"Subject: Hello {n:02d}" for n in range(3)]
    assert all("reply_markup" in m.params for m in at_home)

    own = step(await trace_of(app, home[1]), "delivered")
    assert own["digest"] == {"message": 3, "of": 4, "mails": 1, "summary": False}
    assert own["message_ids"] == [at_home[1].message_id]
    skipped = await trace_of(app, muted)
    assert skipped["status"] == "skipped" and step(skipped, "skipped")["rule"] == "newsletters"
    audit = await app.client.post("/api/audit", headers=app.admin)
    assert audit.json() == {"checked": 16, "missing": 0, "enqueued": 0}


async def test_a_pass_over_many_pages_is_one_digest_and_a_crash_mid_pass_doubles_nothing(
    digesting: ServedApp, fresh: FreshUser,
) -> None:
    """Catches a digest per Email/changes page (a pass of several pages must still give one),
    a cursor saved past mails not enqueued yet (a crash would lose them), and a replayed pass
    that enqueues its mails a second time."""
    app = digesting
    client: JmapClient = fresh.client
    await client.get_session()
    before = await app.redis.get(keys.RECONCILE_CURSOR)
    ids = append_many(app, 15, "Paged")
    small = Budget(initial_window=2, window_cap=4)

    def crash(progress: Progress) -> None:
        if progress.pages >= 2:
            raise RuntimeError("the process dies here")

    with pytest.raises(RuntimeError):
        await reconcile(app.redis, client, INBOX, budget=small, on_progress=crash,
                        digest_threshold=THRESHOLD)
    assert await app.redis.get(keys.RECONCILE_CURSOR) == before  # not past unqueued mail
    assert await entries(app) == []

    result = await reconcile(app.redis, client, INBOX, budget=small,
                             digest_threshold=THRESHOLD)
    assert result.complete and result.pages > 2
    assert (result.enqueued, result.digests) == (15, 1)
    entry_id = await one_digest(app, ids)

    await app.redis.set(keys.RECONCILE_CURSOR, before)  # the cursor write lost: replayed
    again = await reconcile(app.redis, client, INBOX, budget=small, digest_threshold=THRESHOLD)
    assert (again.enqueued, again.digests) == (0, 0)
    assert [i for i, _ in await entries(app)] == [entry_id]
    assert len(await app.emulator.sent_messages(app.token)) == 1


async def test_a_pass_beyond_one_entry_splits_so_every_entry_stays_a_digest(
    fresh: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches a pass that holds an unbounded list (no entry may exceed `DIGEST_MAX_IDS`, here
    4) or ends with a stub entry of a mail or two (notified one by one after a digest): every
    entry of a split pass holds at least half the cap, and every mail is in exactly one."""
    monkeypatch.setattr(backlog_module, "DIGEST_MAX_IDS", 4)  # the passes' bound
    client = fresh.client
    await client.get_session()
    await reconcile(redis_client, client, INBOX)  # the first run
    ids = [cyrus.append(user=fresh.user, subject=f"Split {n}").email_id for n in range(15)]
    result = await reconcile(redis_client, client, INBOX,
                             budget=Budget(initial_window=2, window_cap=4), digest_threshold=2)
    listed = await redis_client.xrange(keys.STREAM_JMAP)
    assert {fields["kind"] for _, fields in listed} == {"digest"}
    held = [fields["email_ids"].split() for _, fields in listed]
    assert sorted(i for part in held for i in part) == sorted(ids)
    assert [len(part) for part in held] == [4, 4, 4, 3]
    assert (result.enqueued, result.digests) == (15, 4)


async def test_a_digest_entry_takes_only_unclaimed_mails_once_each(
    redis_client: aioredis.Redis,
) -> None:
    """Catches a digest that re-sends a mail another path already claimed (the gap auditor, a
    crashed pass), names a mail twice, or an entry with nothing in it."""
    await redis_client.set(keys.dedup_jmap("acct", "m2"), "1-1")
    entry, count = await enqueue_digest(redis_client, "acct", ["m1", "m2", "m3", "m1"])
    assert entry is not None and count == 2
    [(entry_id, fields)] = await redis_client.xrange(keys.STREAM_JMAP)
    assert (entry_id, fields) == (entry, {"kind": "digest", "account_id": "acct",
                                         "email_ids": "m1 m3"})
    assert await redis_client.get(keys.dedup_jmap("acct", "m2")) == "1-1"
    assert await redis_client.get(keys.dedup_jmap("acct", "m3")) == entry
    assert await enqueue_digest(redis_client, "acct", ["m1", "m2", "m3"]) == (None, 0)
    assert await redis_client.xlen(keys.STREAM_JMAP) == 1
    with pytest.raises(ValueError):
        await enqueue_digest(redis_client, "acct", [f"m{n}" for n in range(DIGEST_MAX_IDS + 1)])
