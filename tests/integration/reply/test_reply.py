"""Replying from the chat (issue #25), end to end against the real peers: a mail in Cyrus, its
notification, the owner's answer (a Telegram reply to the notification, played by the Bot API
emulator with `reply_to_message`, or `/reply <id> <text>`) through our HTTPS webhook, the
draft in Cyrus, the Send press, and what the loopback SMTP sink received from Cyrus's relay.
`mailbox` (the conversation tests' fixture) is our own look at alice's mailbox."""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import logging
import time
from typing import Any

import pytest

from messageweave.config.model import parse_wire
from messageweave.mail.jmap import SUBMISSION, JmapClient, JmapSession, JmapTransportError
from messageweave.pipeline import buttons, draft
from messageweave.store import drafts, keys
from tests.helpers import WAIT_S, eventually, keyboard, redis_text
from tests.helpers import press as press_data
from tests.peers.cyrus import make_message
from tests.peers.smtp import Received, SmtpSink
from tests.peers.telegram import SentMessage
from tests.served import ServedApp

BODY_MARK = "Walrus-lantern-4471"  # in the owner's answer: must never stay in Redis or a log


async def notified(served: ServedApp, subject: str) -> tuple[str, str, SentMessage]:
    """A mail from Bob appended to Cyrus and queued: its id, its Message-ID, its
    notification."""
    message_id = email.utils.make_msgid(domain="example.org")
    email_id, notification = await notified_by(served, make_message(
        subject, message_id=message_id, sender="Bob Example <bob@example.org>",
        to="Alice <alice@localhost>"))
    return email_id, message_id, notification


async def notified_by(served: ServedApp, raw: bytes) -> tuple[str, SentMessage]:
    """The mail `raw` appended to Cyrus and queued: its id and its notification."""
    appended = served.cyrus.append(raw)
    await served.enqueue_mail(appended.email_id)
    cfg = parse_wire(served.wire)
    found: list[SentMessage] = []

    async def arrived() -> bool:
        found[:] = [m for m in await served.emulator.sent_messages(served.token)
                    if appended.email_id in {buttons.replied_mail(cfg, d)
                                             for _, d in keyboard(m)}]
        return bool(found)

    await eventually(arrived, "the notification")
    return appended.email_id, found[0]


async def after(served: ServedApp, message_id: int, count: int = 1) -> list[SentMessage]:
    """The first `count` messages the bot sent to the chat after `message_id`."""
    later: list[SentMessage] = []

    async def sent() -> bool:
        later[:] = [m for m in await served.emulator.sent_messages(served.token, served.chat)
                    if m.message_id > message_id]
        return len(later) >= count

    await eventually(sent, lambda: f"{len(later)} of {count} messages")
    return later[:count]


async def answer_in_telegram(served: ServedApp, notification: SentMessage, text: str) -> None:
    delivery = await served.emulator.send_user_message(
        served.token, served.chat, text, reply_to_message_id=notification.message_id)
    assert delivery.status == 204, delivery


async def draft_preview(served: ServedApp, notification: SentMessage) -> SentMessage:
    [preview] = await after(served, notification.message_id)
    assert [t for t, _ in keyboard(preview)] == ["发送", "取消"], preview.text
    return preview


async def press(served: ServedApp, message: SentMessage, label: str) -> dict[str, Any]:
    """Press the button `label` under `message`; the bot's answer to that press."""
    [data] = [d for t, d in keyboard(message) if t == label]
    return await press_data(served, message, data)


def to_bob(subject: str) -> Any:
    return lambda r: r.message["Subject"] == f"Re: {subject}"


async def received(sink: SmtpSink, subject: str, count: int = 1) -> list[Received]:
    return await asyncio.to_thread(sink.wait_for, to_bob(subject), count, WAIT_S)


async def draft_id_of(served: ServedApp, preview: SentMessage) -> str:
    cfg = parse_wire(served.wire)
    [send] = [buttons.verify(cfg, d) for t, d in keyboard(preview) if t == "发送"]
    assert isinstance(send, buttons.DraftButton) and send.action == draft.SEND
    return send.draft_id


async def where(mailbox: JmapClient, email_id: str) -> set[str] | None:
    """The roles of the mailboxes holding the mail; None when the mailbox has none of it."""
    res = await mailbox.call([("Email/get", {"accountId": (await mailbox.get_session())
                                             and mailbox.account_id, "ids": [email_id],
                                             "properties": ["mailboxIds", "keywords"]}, "g")])
    found = res.result("g")["list"]
    if not found:
        return None
    roles = {m.id: m.role for m in await mailbox.mailboxes()}
    return {str(roles.get(m)) for m in found[0]["mailboxIds"]}


async def test_a_telegram_reply_reaches_the_sink_once_threaded_and_sent_holds_it(
    served: ServedApp, smtp_sink: SmtpSink, mailbox: JmapClient,
) -> None:
    """Catches a reply that goes to the wrong address, loses its thread (In-Reply-To,
    References), doubles `Re: `, loses or mangles the owner's text (UTF-8), or stays in Drafts
    after it was sent."""
    email_id, message_id, notification = await notified(served, "Re: Lunch on Friday?")
    await answer_in_telegram(served, notification, f"Yes, 好的 — {BODY_MARK}\nsee you")
    preview = await draft_preview(served, notification)
    assert preview.text.startswith("回复草稿（尚未发送）\n收件人：bob@example.org\n"
                                   "收件人名称（对方自己填写的）：Bob Example\n"
                                   "主题：Re: Lunch on Friday?\n")
    assert BODY_MARK in preview.text
    draft_id = await draft_id_of(served, preview)
    assert await where(mailbox, draft_id) == {"drafts"}
    answer = await press(served, preview, "发送")
    assert answer["text"] == "已发送"
    [sent] = await received(smtp_sink, "Lunch on Friday?")
    mail = sent.message
    assert sent.rcpt_tos == ("bob@example.org",)
    assert mail["To"] == "Bob Example <bob@example.org>"
    assert mail["From"] == "alice@localhost"
    assert mail["In-Reply-To"] == message_id
    assert message_id in mail["References"].split()
    assert sent.body_text().replace("\r\n", "\n").strip() == f"Yes, 好的 — {BODY_MARK}\nsee you"
    [confirmation] = await after(served, preview.message_id)
    assert confirmation.text.startswith("已发送（") and "Asia/Tokyo" in confirmation.text
    assert await where(mailbox, draft_id) == {"sent"}
    assert email_id != draft_id
    await asyncio.sleep(0.5)
    assert len(smtp_sink.matching(to_bob("Lunch on Friday?"))) == 1


async def test_send_pressed_twice_sends_once(
    served: ServedApp, smtp_sink: SmtpSink,
) -> None:
    """Catches a second press of Send (a double tap, or Telegram resending the press)
    submitting the draft again: the send is claimed once per draft."""
    email_id, _, notification = await notified(served, "Twice please")
    await served.say(f"/reply {email_id} Once is enough.")
    preview = await draft_preview(served, notification)
    first = await press(served, preview, "发送")
    second = await press(served, preview, "发送")
    assert first["text"] == "已发送"
    assert second["text"] in ("已经发送过了", "正在处理，请稍候")
    await received(smtp_sink, "Twice please")
    await asyncio.sleep(0.5)
    assert len(smtp_sink.matching(to_bob("Twice please"))) == 1


async def test_a_send_whose_answer_was_lost_is_not_sent_again(
    served: ServedApp, smtp_sink: SmtpSink, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches the retry of a Send whose first attempt submitted the mail but never learnt it
    (the worker killed, or the connection lost, between `EmailSubmission/set` and its answer)
    submitting it a second time. A test double at that seam: the real submission runs, then
    its answer is lost (a transport error) — the one fault a kill there leaves behind for the
    entry's retry, which cannot be produced on demand against a real server."""
    real = JmapClient.submit_draft
    lost: list[str] = []

    async def answer_lost(self: JmapClient, draft_id: str, identity_id: str) -> str | None:
        await real(self, draft_id, identity_id)
        lost.append(draft_id)
        raise JmapTransportError("the connection closed before the answer")

    monkeypatch.setattr(JmapClient, "submit_draft", answer_lost)
    email_id, _, notification = await notified(served, "Lost answer")
    await served.say(f"/reply {email_id} Only one copy.")
    preview = await draft_preview(served, notification)
    first = await press(served, preview, "发送")
    assert first["text"] == "暂时连不上邮件服务器，稍后会自动重试"
    [confirmation] = await after(served, preview.message_id)  # the retry's
    assert confirmation.text.startswith("已发送（")
    assert len(lost) == 1
    await received(smtp_sink, "Lost answer")
    await asyncio.sleep(0.5)
    assert len(smtp_sink.matching(to_bob("Lost answer"))) == 1


async def test_cancel_leaves_no_draft_and_sends_nothing(
    served: ServedApp, smtp_sink: SmtpSink, mailbox: JmapClient,
) -> None:
    """Catches Cancel leaving the draft in Drafts, sending it, or a Send pressed after it
    still sending it."""
    email_id, _, notification = await notified(served, "Never mind")
    await served.say(f"/reply {email_id} On second thought…")
    preview = await draft_preview(served, notification)
    draft_id = await draft_id_of(served, preview)
    assert (await press(served, preview, "取消"))["text"] == "草稿已删除"
    assert await where(mailbox, draft_id) is None
    record = await drafts.record(served.redis, keys.DEFAULT, draft_id)
    assert record is not None and record.outcome == "cancelled"
    assert await served.redis.zscore(keys.REPLY_DRAFTS, draft_id) is None
    late = await served.emulator.press_button(served.token, served.chat, preview.message_id,
                                              buttons.callback_data(parse_wire(served.wire),
                                                                    draft.SEND, draft_id) or "")
    assert late.status == 204
    await asyncio.sleep(0.5)
    assert smtp_sink.matching(to_bob("Never mind")) == []


async def test_a_draft_not_sent_within_a_day_is_destroyed(
    served: ServedApp, mailbox: JmapClient,
) -> None:
    """Catches drafts made from the chat piling up in Drafts when the owner never presses
    Send or Cancel. The expiry is run with the clock a day ahead (what the worker's loop
    calls), not waited for."""
    email_id, _, notification = await notified(served, "Forgotten")
    await served.say(f"/reply {email_id} Left alone.")
    draft_id = await draft_id_of(served, await draft_preview(served, notification))

    async def jmap() -> JmapClient:
        return mailbox

    assert await draft.expire_drafts(served.redis, keys.DEFAULT, jmap, now=time.time()) == 0
    later = time.time() + keys.REPLY_DRAFT_MAX_AGE_S + 1
    assert await draft.expire_drafts(served.redis, keys.DEFAULT, jmap, now=later) >= 1
    assert await where(mailbox, draft_id) is None
    record = await drafts.record(served.redis, keys.DEFAULT, draft_id)
    assert record is not None and record.outcome == "expired"


async def test_a_strangers_chat_can_neither_read_nor_reply(
    served: ServedApp, smtp_sink: SmtpSink,
) -> None:
    """Catches a chat outside the allowlist making a draft (`/reply`, or a Telegram reply),
    reading the mail, or pressing Send on a draft it got hold of (the data is signed, the
    chat is not)."""
    email_id, _, notification = await notified(served, "Not yours")
    stranger = served.chat + 4242
    drafts_before = await served.redis.zcard(keys.REPLY_DRAFTS)
    for text in (f"/reply {email_id} Hijack", f"/read {email_id}"):
        status = await served.say(text, chat_id=stranger)
        assert status in (204, 403)
    await served.say(f"/reply {email_id} Mine.")
    preview = await draft_preview(served, notification)
    [send] = [d for t, d in keyboard(preview) if t == "发送"]
    pressed = await served.emulator.press_button(served.token, stranger, None, send)
    assert pressed.status in (204, 403)
    await asyncio.sleep(0.5)
    assert await served.emulator.sent_messages(served.token, stranger) == []
    assert await served.redis.zcard(keys.REPLY_DRAFTS) == drafts_before + 1
    assert smtp_sink.matching(to_bob("Not yours")) == []


@pytest.fixture
def without_submission(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every JMAP session read without `urn:ietf:params:jmap:submission`. Cyrus cannot be told
    to drop the capability, so this test double of the session does: the real session,
    without it."""
    real = JmapClient.get_session

    async def session(self: JmapClient, *, refresh: bool = False) -> JmapSession:
        found = await real(self, refresh=refresh)
        caps = {k: v for k, v in found.capabilities.items() if k != SUBMISSION}
        return dataclasses.replace(found, capabilities=caps)

    monkeypatch.setattr(JmapClient, "get_session", session)


async def test_a_server_without_submission_gets_a_clear_answer(
    served: ServedApp, without_submission: None,
) -> None:
    """Catches a reply on a server that cannot send (no `urn:ietf:params:jmap:submission` in
    its session) failing silently, or leaving a draft that can never go."""
    email_id, _, notification = await notified(served, "No sending here")
    drafts_before = await served.redis.zcard(keys.REPLY_DRAFTS)
    await served.say(f"/reply {email_id} Will not go.")
    [answer] = await after(served, notification.message_id)
    assert answer.text == "此邮件服务器不支持发信（JMAP submission），无法在聊天中回复"
    assert keyboard(answer) == []
    assert await served.redis.zcard(keys.REPLY_DRAFTS) == drafts_before


async def test_test_connection_says_replies_are_off_without_submission(
    served: ServedApp, without_submission: None,
) -> None:
    """Catches the page's "Test connection" passing a server that cannot send without saying
    that replies from the chat are off, or failing the mail server for it (it is reachable)."""
    answer = await served.client.post("/api/business-config/preflight", headers=served.admin,
                                      json={})
    assert answer.status_code == 200, answer.text
    components = answer.json()["components"]
    assert components["jmap"] == {"ok": True}
    assert components["replies"] == {"ok": False, "errors": [{
        "component": "replies", "step": "submission",
        "detail": "the mail server does not offer sending (urn:ietf:params:jmap:submission): "
                  "replies from the chat are off"}]}


async def test_no_reply_text_is_left_in_redis_or_the_logs(
    served: ServedApp, smtp_sink: SmtpSink, caplog: pytest.LogCaptureFixture,
) -> None:
    """Catches the owner's words staying behind after the reply was made and sent: every
    Redis key (`redis_text`: strings, hashes, lists, sets, sorted sets, streams) and every log
    record is scanned for the text's marker."""
    caplog.set_level(logging.DEBUG)
    _, _, notification = await notified(served, "Scan the reply")
    await answer_in_telegram(served, notification, f"Private words {BODY_MARK}.")
    preview = await draft_preview(served, notification)
    await press(served, preview, "发送")
    await received(smtp_sink, "Scan the reply")
    await after(served, preview.message_id)
    await asyncio.sleep(0.5)
    assert BODY_MARK not in await redis_text(served.redis)
    logged = "\n".join(f"{r.getMessage()} {r.__dict__!r}" for r in caplog.records)
    assert BODY_MARK not in logged
