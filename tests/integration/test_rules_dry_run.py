"""`POST /api/rules/dry-run` (issue #16) through the real app on a fresh Cyrus mailbox: which
rule the newest mails of the notify mailboxes would meet, with the saved rules and with values
not saved yet, and the refusals of wrong values and wrong callers."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.api.admin import CONFIG_ERROR_HEADER
from messageweave.config import crypto
from messageweave.pipeline import routing
from messageweave.store.config_store import ConfigStore
from tests.helpers import (
    FreshUser,
    assert_envelope,
    eventually,
    login,
    metric_value,
    sample_wire,
    settings_for,
)
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator
from tests.served import CHAT, ServedApp, served_app

TEAM = -1009876543
RULES = [
    {"name": "newsletters", "subject": "newsletter", "action": "mute"},
    {"name": "team", "from": "@example.org", "chat_id": TEAM, "thread_id": 7, "silent": True},
]
PATH = "/api/rules/dry-run"


@pytest.fixture
async def app(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, cyrus: CyrusServer,
    fresh: FreshUser, telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> AsyncIterator[ServedApp]:
    """The app on a fresh mailbox with RULES saved (no periodic reconcile: nothing is sent)."""
    async with served_app(client, redis_client, cyrus, telegram_emulator,
                          jmap_username=fresh.user, jmap_password=fresh.password,
                          chat_allowlist=[CHAT, TEAM], notify_rules=RULES,
                          reconcile_interval_s=0, audit_interval_s=0) as served:
        yield served


def append(app: ServedApp, subject: str, minutes_ago: int, sender: str = "Bob <bob@else.test>",
           mailbox: str = "INBOX") -> str:
    return app.cyrus.append(user=str(app.wire["jmap_username"]), subject=subject, sender=sender,
                            mailbox=mailbox,
                            received_at=time.time() - 60 * minutes_ago).email_id


async def dry_run(app: ServedApp, **kw: Any) -> dict[str, Any]:
    answer = await app.client.post(PATH, headers=app.admin, **kw)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def also_in_trash(fresh: FreshUser, email_id: str) -> None:
    """The mail is in the Inbox and in the Trash at once (JMAP lets a mail be in several)."""
    trash = next(b.id for b in await fresh.client.mailboxes() if b.role == "trash")
    account = fresh.client.account_id
    answer = await fresh.client.call([("Email/set", {
        "accountId": account, "update": {email_id: {f"mailboxIds/{trash}": True}}}, "s")])
    assert email_id in answer.result("s", "Email/set")["updated"]


async def test_the_saved_rules_are_tried_on_the_newest_twenty_notify_mails(
    app: ServedApp, fresh: FreshUser,
) -> None:
    """Catches a dry run that judges other mail than the pipeline would (Trash, an inbox mail
    that is also in the Trash, or more than the newest 20), in another order, or decides
    differently from the rules: each mail shows the rule, the action, the chat, the topic and
    the silence."""
    team = append(app, "Build is green", 1, sender="Ann <ann@example.org>")
    news = append(app, "Monthly Newsletter", 2, sender="News <news@example.org>")
    other = append(app, "Lunch?", 3)
    append(app, "Thrown away", 0, mailbox="Trash")
    await also_in_trash(fresh, append(app, "Deleted too", 0))
    older = [append(app, f"Old {n}", 10 + n) for n in range(19)]

    body = await dry_run(app)
    assert body["checked"] == 20
    assert [m["email_id"] for m in body["mails"]] == [team, news, other, *older[:17]]
    by_id = {m["email_id"]: m for m in body["mails"]}
    assert by_id[team] == {
        "email_id": team, "from": "Ann <ann@example.org>", "subject": "Build is green",
        "received_at": by_id[team]["received_at"], "rule": "team", "action": "notify",
        "chat_id": TEAM, "thread_id": 7, "silent": True, "quiet": False}
    assert abs(by_id[team]["received_at"] - (time.time() - 60)) < 120
    assert (by_id[news]["rule"], by_id[news]["action"]) == ("newsletters", "mute")
    assert {k: by_id[other][k] for k in ("rule", "action", "chat_id", "thread_id", "silent")} \
        == {"rule": None, "action": "notify", "chat_id": CHAT, "thread_id": None,
            "silent": False}
    assert await dry_run(app, json={}) == body
    assert await app.emulator.sent_messages(app.token) == []  # a dry run sends nothing


async def test_unsaved_rules_and_quiet_hours_are_tried_without_saving_them(
    app: ServedApp, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches a dry run that ignores the values the page has not saved yet, or saves them:
    the body's rules and quiet hours decide (at the pipeline's clock, in the configured zone),
    and the stored configuration does not move."""
    mail = append(app, "Build is green", 1, sender="Ann <ann@example.org>")
    before = (await app.client.get("/api/business-config", headers=app.admin)).json()
    night = dt.datetime(2026, 3, 2, 23, 30, tzinfo=dt.timezone(dt.timedelta(hours=9)))
    monkeypatch.setattr(routing, "clock", lambda: night)  # the app's zone is Asia/Tokyo

    tried = await dry_run(app, json={
        "notify_rules": [{"name": "boss", "from": "ann@example.org", "thread_id": 3}],
        "quiet_hours": {"start": "22:00", "end": "07:00"}})
    [verdict] = [m for m in tried["mails"] if m["email_id"] == mail]
    assert (verdict["rule"], verdict["chat_id"], verdict["thread_id"]) == ("boss", CHAT, 3)
    assert verdict["quiet"] is True and verdict["silent"] is True

    nothing = await dry_run(app, json={"notify_rules": [], "quiet_hours": None})
    assert nothing["mails"][0]["rule"] is None and nothing["mails"][0]["quiet"] is False
    saved = await dry_run(app, content=b"")
    assert saved["mails"][0]["rule"] == "team"
    assert (await app.client.get("/api/business-config", headers=app.admin)).json() == before


@pytest.mark.parametrize(("body", "field"), [
    ({"notify_rules": [{"name": "x", "chat_id": 999}]},
     "NOTIFY_RULES[0].chat_id must be in CHAT_ALLOWLIST"),
    ({"notify_rules": [{"name": "x"}, {"name": "y", "from": "not an address"}]},
     "NOTIFY_RULES[1].from must be an address (ada@example.org) or a domain (@example.org)"),
    ({"notify_rules": "all"}, "NOTIFY_RULES must be a list of rules"),
    ({"quiet_hours": {"start": "25:00", "end": "07:00"}},
     "QUIET_HOURS.start must be a time HH:MM (00:00 to 23:59)"),
])
async def test_a_wrong_value_is_a_422_naming_the_field(
    app: ServedApp, body: dict[str, Any], field: str,
) -> None:
    """Catches a dry run that judges with a value the save would refuse (a chat outside the
    allowlist among them), or refuses it without saying which field is wrong."""
    answer = await app.client.post(PATH, headers=app.admin, json=body)
    assert_envelope(answer, 422, "invalid_configuration")
    assert answer.headers[CONFIG_ERROR_HEADER] == field


async def test_other_bodies_and_other_callers_are_refused(app: ServedApp) -> None:
    """Catches a dry run open to the worker token or the admin key (it lists the owner's
    senders and subjects), and one that silently ignores a field it cannot try."""
    client = app.client
    for body in (b"[]", b"not json", b'{"bot_language": "en"}', b'{"revision": 1}'):
        assert_envelope(await client.post(PATH, headers=app.admin, content=body), 400,
                        "invalid_request")
    assert_envelope(await client.post(PATH), 401, "unauthorized")
    worker = {"Authorization": f"Bearer {app.wire['worker_token']}"}
    assert_envelope(await client.post(PATH, headers=worker), 403, "forbidden")


async def test_without_a_configuration_or_a_mailbox_it_answers_503(
    client: httpx.AsyncClient,
) -> None:
    """Catches a 500 (or an empty 200) when there is nothing to judge with or no mailbox to
    read: both are a 503 envelope the page can show."""
    admin = await login(client)
    assert_envelope(await client.post(PATH, headers=admin), 503, "service_unavailable")
    saved = await client.put("/api/business-config", headers=admin, json=sample_wire())
    assert saved.status_code == 200, saved.text  # its JMAP server is a closed port
    assert_envelope(await client.post(PATH, headers=admin), 503, "service_unavailable")


async def test_a_configuration_stored_before_the_save_limits_can_still_be_dry_run(
    app: ServedApp, embedded_redis_url: str,
) -> None:
    """Catches the dry run judging the tried values with the save-time limits: an instance
    upgraded with a configuration from before them (a worker token under 16 characters, which
    it still loads and serves with) got a 422 about that token instead of its dry run."""
    weak = {**app.wire, "worker_token": "short-token"}  # 11 characters
    store = ConfigStore(app.redis)
    stored = await store.business_config()
    key = settings_for(embedded_redis_url).encryption_key
    # written the way an older version stored it: encrypted, never checked against the limits
    revision = await store.write_business_config(
        crypto.encrypt(key, json.dumps(weak).encode()), stored.revision)
    mail = append(app, "Build is green", 1, sender="Ann <ann@example.org>")
    body = {"notify_rules": [{"name": "ann", "from": "ann@example.org"}]}
    seen: list[Any] = [None, None]

    async def reloaded() -> bool:  # the hot reload took it and built its clients (503 before)
        seen[0] = metric_value((await app.client.get("/metrics", headers=app.admin)).text,
                               "messageweave_config_revision")
        seen[1] = await app.client.post(PATH, headers=app.admin, json=body)
        return bool(seen[0] == revision and seen[1].status_code != 503)
    await eventually(reloaded, lambda: f"revision {revision} in force (revision {seen[0]}, "
                                       f"answer {seen[1] and seen[1].status_code})", 10)
    answer = seen[1]
    assert answer.status_code == 200, answer.text
    [verdict] = [m for m in answer.json()["mails"] if m["email_id"] == mail]
    assert verdict["rule"] == "ann"
