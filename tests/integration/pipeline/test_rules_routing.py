"""Notification rules and quiet hours (issue #16) through the real pipeline: mail appended to a
fresh Cyrus mailbox, found by the reconcile, sent by the running worker to the Bot API
emulator, whose stored sendMessage bodies show the chat, the topic and the silence."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.config.model import parse_wire
from messageweave.mail.jmap import JmapClient
from messageweave.pipeline import routing
from messageweave.pipeline.governor import bot_id
from messageweave.store import keys
from tests.helpers import ADMIN_KEY, FreshUser, eventually, run_cli, sample_wire
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import SentMessage, TelegramEmulator
from tests.served import CHAT, ServedApp, served_app

TEAM = -1001234567  # a forum supergroup (negative: a group lane for the governor)
TOPIC = 42
RECONCILE = {"Authorization": "Bearer reconcile-SECRET"}
RULES = [
    {"name": "newsletters", "subject": "newsletter", "action": "mute"},
    {"name": "team", "from": "@example.org", "chat_id": TEAM, "thread_id": TOPIC,
     "silent": True},
]
TOKYO = dt.timezone(dt.timedelta(hours=9))


@pytest.fixture
async def routed(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, cyrus: CyrusServer,
    fresh: FreshUser, telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> AsyncIterator[ServedApp]:
    """The app on a fresh mailbox (so a gap audit sees only this test's mail) with RULES, two
    allowlisted chats, no periodic reconcile or audit, and the reconcile's first run done."""
    async with served_app(client, redis_client, cyrus, telegram_emulator,
                          jmap_username=fresh.user, jmap_password=fresh.password,
                          chat_allowlist=[CHAT, TEAM], notify_rules=RULES,
                          reconcile_interval_s=0, audit_interval_s=0) as app:
        await reconcile(app)
        # receivedAt has a 1 s resolution: mail of the first run's second is not audited.
        baseline = int(await app.redis.get(keys.RECONCILE_BASELINE))
        await app.redis.set(keys.RECONCILE_BASELINE, baseline - 2)
        yield app


async def reconcile(app: ServedApp) -> None:
    assert (await app.client.post("/reconcile", headers=RECONCILE)).status_code == 204


def append(app: ServedApp, subject: str, sender: str = "Bob <bob@elsewhere.test>") -> str:
    return app.cyrus.append(user=str(app.wire["jmap_username"]), subject=subject,
                            sender=sender).email_id


async def sent_to(app: ServedApp, chat: int, count: int) -> list[SentMessage]:
    return await app.emulator.wait_for_messages(app.token, chat, count, 8.0)


async def terminal(app: ServedApp, email_id: str) -> dict[str, Any]:
    """The terminal record of the mail's entry, once there is one."""
    account = str(app.wire["jmap_username"])
    record: dict[str, Any] = {}

    async def finished() -> bool:
        nonlocal record
        entry = await app.redis.get(keys.dedup_jmap(account, email_id))
        raw = await app.redis.get(keys.delivery_committed(keys.STREAM_JMAP, str(entry)))
        record = json.loads(raw) if raw else {}
        return bool(record)

    await eventually(finished, "the entries finished", 10)
    return record


def flag(params: dict[str, Any], name: str) -> object:
    """A sendMessage parameter as the emulator stored it (a form field arrives as text)."""
    value = params.get(name)
    return json.loads(value) if isinstance(value, str) else value


async def test_a_domains_mail_goes_silently_to_its_forum_topic_and_others_stay_home(
    routed: ServedApp,
) -> None:
    """Catches a rule that is evaluated but not applied: the mail of the domain must reach the
    rule's chat in its topic with `disable_notification`, nothing of it the default chat; a
    mail no rule matches still goes to the default chat aloud, and the governor is charged
    for the chat actually sent to."""
    await routed.redis.hset(keys.GOVERNOR_LIMITS, "group_per_min", 6000)  # charge group lanes
    team_mail = append(routed, "Build is green", sender="Ann Lee <Ann@Example.org>")
    home_mail = append(routed, "Lunch?")
    await reconcile(routed)

    [to_team] = await sent_to(routed, TEAM, 1)
    [to_home] = await sent_to(routed, CHAT, 1)
    assert "Subject: Build is green" in to_team.text and "Subject: Lunch?" in to_home.text
    assert flag(to_team.params, "message_thread_id") == TOPIC
    assert flag(to_team.params, "disable_notification") is True
    assert "message_thread_id" not in to_home.params
    assert not flag(to_home.params, "disable_notification")
    # Routed away from its lane's chat, a notification keeps the buttons every one gets.
    assert ("reply_markup" in to_team.params) == ("reply_markup" in to_home.params)
    assert (await terminal(routed, team_mail))["message_ids"] == [to_team.message_id]
    assert (await terminal(routed, home_mail))["state"] == "delivered"

    bot = bot_id(routed.token)
    assert await routed.redis.exists(keys.governor_chat(bot, TEAM))
    send_log = (await routed.client.get("/api/logs/send", headers=routed.admin)).json()
    chats = {r["message_ids"][0]: r["chat_id"] for r in send_log["records"]
             if r["outcome"] == "delivered"}
    assert chats == {to_team.message_id: TEAM, to_home.message_id: CHAT}


async def test_a_muted_mail_sends_nothing_and_is_not_counted_missing(
    routed: ServedApp, embedded_redis_url: str,
) -> None:
    """Catches a mute that leaves the entry unfinished (retried, dead-lettered, or found
    missing by the gap auditor and sent after all): nothing reaches Telegram, the entry ends
    `skipped` with the rule's name, acknowledged, and the trace (API and command) says which
    rule muted it."""
    email_id = append(routed, "Weekly NEWSLETTER #12", sender="News <news@example.org>")
    await reconcile(routed)

    record = await terminal(routed, email_id)
    assert record["state"] == "skipped" and record["rule"] == "newsletters"
    assert await routed.emulator.sent_messages(routed.token) == []
    status = (await routed.client.get("/api/delivery", headers=routed.admin)).json()
    assert status["streams"]["stalwart:jmap"]["pending"] == 0
    assert status["streams"]["stalwart:jmap"]["dlq"] == 0
    assert status["unknown_after_send"] == 0
    logged = (await routed.client.get("/api/logs/send", params={"outcome": "skipped"},
                                      headers=routed.admin)).json()["records"]
    assert [(r["rule"], r["message_ids"], r["failure_class"]) for r in logged] == \
        [("newsletters", [], None)]

    audit = await routed.client.post("/api/audit", headers=routed.admin)
    assert audit.status_code == 200, audit.text
    assert audit.json() == {"checked": 1, "missing": 0, "enqueued": 0}
    trace = (await routed.client.get("/api/trace", params={"q": email_id},
                                     headers=routed.admin)).json()
    [mail] = trace["mails"]
    assert mail["status"] == "skipped"
    assert next(s for s in mail["steps"] if s["step"] == "skipped")["rule"] == "newsletters"
    assert await routed.emulator.sent_messages(routed.token) == []  # the audit sent nothing
    code, out = await run_cli("trace", email_id, REDIS_URL=embedded_redis_url,
                              CONFIG_ENCRYPTION_KEY=ADMIN_KEY,
                              SSL_CERT_FILE=str(routed.cyrus.ca_file))
    assert code == 0, out
    assert f"{email_id} 'Weekly NEWSLETTER #12': muted by a rule" in out
    assert "muted by rule newsletters" in out


async def test_quiet_hours_silence_notifications_at_the_injected_time(
    routed: ServedApp, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches quiet hours that never reach the send (or are read in UTC): at 23:30 in the
    configured zone (Asia/Tokyo) a mail is sent with `disable_notification`, at 12:00 aloud."""
    await routed.configure(quiet_hours={"start": "22:00", "end": "07:00"})
    night = dt.datetime(2026, 3, 2, 23, 30, tzinfo=TOKYO)  # 14:30 UTC: outside in UTC
    monkeypatch.setattr(routing, "clock", lambda: night)
    append(routed, "At night")
    await reconcile(routed)
    [quiet] = await sent_to(routed, CHAT, 1)
    assert flag(quiet.params, "disable_notification") is True

    monkeypatch.setattr(routing, "clock", lambda: night.replace(hour=12, minute=0))
    append(routed, "At noon")
    await reconcile(routed)
    [_, loud] = await sent_to(routed, CHAT, 2)
    assert "Subject: At noon" in loud.text
    assert not flag(loud.params, "disable_notification")


async def test_a_mailbox_role_rule_reads_the_roles_from_cyrus(routed: ServedApp) -> None:
    """Catches a role rule that never matches because the pipeline does not know the roles of
    a mail's mailboxes: an inbox rule sends the mail to its chat."""
    await routed.configure(notify_rules=[{"name": "inbox", "mailbox_role": "INBOX",
                                          "chat_id": TEAM}])
    append(routed, "In the inbox")
    await reconcile(routed)
    [sent] = await sent_to(routed, TEAM, 1)
    assert "Subject: In the inbox" in sent.text
    assert "message_thread_id" not in sent.params


async def test_the_mailbox_list_is_read_only_for_role_rules_and_then_once(
    fresh: FreshUser, cyrus: CyrusServer,
) -> None:
    """Catches a push path that pays a Mailbox/get per mail: without a role rule none is made,
    with one the list is read once for many mails (until it is `ROLES_TTL_S` old)."""
    client: JmapClient = fresh.client
    ids = [cyrus.append(user=fresh.user, subject=f"Roles {n}").email_id for n in range(3)]
    metas = await client.get_emails(ids)
    fresh.transport.clear()
    plain = parse_wire(sample_wire(chat_allowlist=[CHAT, TEAM], notify_rules=RULES))
    for meta in metas:
        assert (await routing.facts_for(plain, client, meta)).roles == frozenset()
    assert not fresh.transport.posts()

    by_role = parse_wire(sample_wire(notify_rules=[{"name": "r", "mailbox_role": "inbox"}]))
    for meta in metas:
        assert (await routing.facts_for(by_role, client, meta)).roles == frozenset({"inbox"})
    calls = [call[0] for body in fresh.transport.posts() for call in body["methodCalls"]]
    assert calls == ["Mailbox/get"]
