"""A stranger's mail cannot steer the owner's reply (issue #32, findings 1 and 3), against the
real Cyrus and the loopback SMTP sink: a Subject or a display name carrying CR/LF must not add a
recipient or a header to the mail Cyrus builds and sends, the confirm step must show the bare
address the reply goes to (first) and say when it is a Reply-To that is not the From, and no
name the bot prints keeps a control or format character."""

from __future__ import annotations

import asyncio
import base64
import email.utils
import unicodedata
import uuid
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from messageweave.config.model import parse_wire
from messageweave.mail.jmap import JmapClient
from messageweave.pipeline import reply
from messageweave.untrusted import clean
from tests.helpers import CYRUS_USER, WAIT_S, keyboard, sample_wire
from tests.integration.reply.test_reply import after, draft_preview, notified_by, press
from tests.peers.cyrus import CyrusServer
from tests.peers.smtp import Received, SmtpSink
from tests.served import ServedApp

BOB = "bob@example.org"
VICTIM = "victim@evil.example"
ATTACKER = "attacker@evil.example"
ENGLISH = parse_wire(sample_wire(bot_language="en"))


def encoded(text: str) -> str:
    """`text` as one RFC 2047 encoded word (UTF-8, base64): how a mail hides CR/LF in a
    header."""
    return "=?UTF-8?B?" + base64.b64encode(text.encode()).decode() + "?="


def raw_mail(subject: str, *, sender: str = f"Bob Example <{BOB}>",
             reply_to: str | None = None, message_id: str | None = None) -> bytes:
    """A mail written by hand (CRLF), its header values exactly as given."""
    lines = [f"From: {sender}", "To: Alice <alice@localhost>", f"Subject: {subject}",
             f"Date: {email.utils.formatdate()}",
             f"Message-ID: {message_id or email.utils.make_msgid(domain='example.org')}",
             "MIME-Version: 1.0", "Content-Type: text/plain; charset=utf-8"]
    if reply_to is not None:
        lines.append(f"Reply-To: {reply_to}")
    return ("\r\n".join(lines) + "\r\n\r\nHello.\r\n").encode()


async def reply_and_send(served: ServedApp, sink: SmtpSink, raw: bytes) -> tuple[str, Received]:
    """`/reply` to the mail, Send pressed: the confirm step's text and what the sink got."""
    email_id, notification = await notified_by(served, raw)
    mark = uuid.uuid4().hex
    await served.say(f"/reply {email_id} Answer {mark}")
    preview = await draft_preview(served, notification)
    assert (await press(served, preview, "发送"))["text"] == "已发送"
    [sent] = await asyncio.to_thread(sink.wait_for, lambda r: mark in r.body_text(), 1, WAIT_S)
    return preview.text, sent


def controls(text: str) -> set[str]:
    """The control, format, surrogate and line-separator characters of `text`."""
    return {c for c in text if unicodedata.category(c) in {"Cc", "Cf", "Cs", "Zl", "Zp"}}


def headers_of(sent: Received) -> list[str]:
    return [name.lower() for name in sent.message]


async def test_a_subject_with_crlf_adds_no_recipient(
    served: ServedApp, smtp_sink: SmtpSink,
) -> None:
    """Catches a Subject whose encoded word decodes to `Invoice 3\\r\\nBcc: victim@…` becoming
    a Bcc header of the reply Cyrus builds: the victim got a copy of the owner's mail."""
    subject = encoded(f"Invoice 3\r\nBcc: {VICTIM}")
    shown, sent = await reply_and_send(served, smtp_sink, raw_mail(subject))
    assert sent.rcpt_tos == (BOB,)
    assert "bcc" not in headers_of(sent)
    assert sent.message["Subject"] == f"Re: Invoice 3 Bcc: {VICTIM}"
    assert f"主题：Re: Invoice 3 Bcc: {VICTIM}\n" in shown


async def test_a_reply_to_name_with_crlf_adds_no_recipient_or_header(
    served: ServedApp, smtp_sink: SmtpSink,
) -> None:
    """Catches a Reply-To display name `Bob\\r\\nBcc: victim@…\\r\\nX-Y: z` splitting the To
    header of the reply: it went to the victim only, with a header of the sender's choosing,
    and the confirm step printed the injected lines as if they were the recipient."""
    name = f"Bob\r\nBcc: {VICTIM}\r\nX-Y: z"
    shown, sent = await reply_and_send(
        served, smtp_sink, raw_mail("Quarterly numbers", reply_to=f"{encoded(name)} <{BOB}>"))
    assert sent.rcpt_tos == (BOB,)
    assert "bcc" not in headers_of(sent) and "x-y" not in headers_of(sent)
    [to] = sent.message["To"].addresses
    assert (to.addr_spec, to.display_name) == (BOB, f"Bob Bcc: {VICTIM} X-Y: z")
    assert shown.startswith(f"回复草稿（尚未发送）\n收件人：{BOB}\n"
                            f"收件人名称（对方自己填写的）：Bob Bcc: {VICTIM} X-Y: z\n主题：")


async def test_a_spoofed_to_line_shows_the_real_address_first_and_warns(
    served: ServedApp, smtp_sink: SmtpSink,
) -> None:
    """Catches the confirm step showing `To: Bob Example <bob@…>` (a Reply-To name that looks
    like an address, 30 line breaks and a zero-width space pushing the real address out of
    sight) while the reply goes to the attacker; a U+202E in the From name reaching the chat;
    Read not showing the Reply-To at all."""
    spoof = f"Bob Example <{BOB}>" + "\n" * 30 + "\u200b"
    reversed_name = encoded("Bob \u202egnp.exe")
    raw = raw_mail("Your invoice", sender=f"{reversed_name} <{BOB}>",
                   reply_to=f"{encoded(spoof)} <{ATTACKER}>")
    email_id, notification = await notified_by(served, raw)
    assert "\u202e" not in notification.text
    await served.say(f"/read {email_id}")
    read = await after(served, notification.message_id)
    assert f"回复地址（Reply-To）：Bob Example <{BOB}> <{ATTACKER}>\n" in read[0].text
    assert "发件人：Bob gnp.exe <bob@example.org>\n" in read[0].text
    await served.say(f"/reply {email_id} Paid already.")
    [preview] = await after(served, read[-1].message_id)
    lines = preview.text.splitlines()
    assert lines[:4] == ["回复草稿（尚未发送）", f"收件人：{ATTACKER}",
                         f"收件人名称（对方自己填写的）：Bob Example <{BOB}>",
                         f"⚠️ 回复将发往 Reply-To 地址，而不是发件人 {BOB}"]
    assert not any(c in preview.text for c in "\u200b\u202e")
    assert (await press(served, preview, "发送"))["text"] == "已发送"
    [sent] = await asyncio.to_thread(smtp_sink.wait_for,
                                     lambda r: r.message["Subject"] == "Re: Your invoice", 1,
                                     WAIT_S)
    assert sent.rcpt_tos == (ATTACKER,)  # what the confirm step showed first


async def test_a_recipient_that_is_not_a_plain_address_is_refused(
    served: ServedApp,
) -> None:
    """Catches a Reply-To whose address is not a bare addr-spec (a quoted local part with a
    space and a second `@`) going into a draft, where a header parser may read it as two
    addresses: the owner is told to reply from the mail client instead, no draft is made."""
    raw = raw_mail("Odd address", reply_to=f'<"{VICTIM} x"@evil.example>')
    email_id, notification = await notified_by(served, raw)
    drafts_before = len(await served.redis.zrange("reply:drafts", 0, -1))
    await served.say(f"/reply {email_id} Hello.")
    [answer] = await after(served, notification.message_id)
    assert answer.text.startswith("无法回复：收件人地址 "), answer.text
    assert answer.text.endswith("不是普通的邮件地址，请在邮件客户端中回复")
    assert keyboard(answer) == []
    assert len(await served.redis.zrange("reply:drafts", 0, -1)) == drafts_before


# --- the property: whatever the header values, the draft holds the headers we meant ---------

_HOSTILE = st.text(
    st.one_of(st.sampled_from("\r\n\t\x00\x0b\x0c\x1b\x7f\x85\u2028\u2029"),
              st.characters(categories=["Cc", "Cf"]),
              st.sampled_from("Bcc: To: <>@,;\"' x"),
              st.characters(codec="utf-8", exclude_categories=["Cs"])),
    min_size=1, max_size=30)
_EXPECTED_HEADERS = {"from", "to", "subject", "in-reply-to", "references", "date",
                     "message-id", "mime-version", "content-type",
                     "content-transfer-encoding", "user-agent"}


async def stored_mail(mailbox: JmapClient, email_id: str) -> dict[str, Any]:
    """The mail as Cyrus stored and decoded it (its raw headers too)."""
    res = await mailbox.call([("Email/get", {
        "accountId": mailbox.account_id, "ids": [email_id],
        "properties": ["headers", "to", "replyTo", "subject", "bcc", "cc"]}, "g")])
    [found] = res.result("g")["list"]
    assert isinstance(found, dict)
    return found


def confirm_addresses(text: str) -> Sequence[str]:
    [line] = [t for t in text.splitlines() if t.startswith("To: ")]
    return tuple(line.removeprefix("To: ").split(", "))


@settings(max_examples=12, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(subject=_HOSTILE, name=_HOSTILE)
async def test_hostile_header_values_make_exactly_the_draft_we_meant(
    cyrus: CyrusServer, mailbox: JmapClient, smtp_sink: SmtpSink, subject: str, name: str,
) -> None:
    """Catches any control or format character in a Subject or a Reply-To name (random ones,
    RFC 2047-encoded) adding, splitting or renaming a header of the draft Cyrus stores, or a
    recipient to the submission: the stored draft has exactly the headers we meant, the
    subject and the name cleaned, and the sink's envelope is exactly what the confirm step
    showed. What we meant is the cleaning of what Cyrus decoded (it drops some characters
    itself, a NUL for one). One Cyrus user and connection for every example."""
    raw = raw_mail(encoded(subject), reply_to=f"{encoded(name)} <{BOB}>")
    email_id = cyrus.append(raw).email_id
    await mailbox.get_session()
    decoded = await stored_mail(mailbox, email_id)
    [reply_to] = decoded["replyTo"]
    source = await mailbox.reply_source(email_id)
    assert source is not None
    chosen = reply.pick_identity(await mailbox.identities(), source, CYRUS_USER)
    assert chosen is not None
    mark = uuid.uuid4().hex
    draft = reply.draft_of(source, chosen[1], f"Property {mark}")
    draft_id = await mailbox.create_draft(draft)
    stored = await stored_mail(mailbox, draft_id)
    names = {h["name"].lower() for h in stored["headers"]}
    assert names <= _EXPECTED_HEADERS and {"from", "to", "subject"} <= names, names
    assert stored["to"] == [{"name": clean(reply_to["name"]) or None, "email": BOB}]
    # Cyrus stores `Re: ` (an empty subject's reply) as `Re:`.
    assert stored["subject"] == draft.subject.rstrip() == reply.reply_subject(
        decoded["subject"]).rstrip()
    assert draft.subject.startswith("Re:") and not controls(draft.subject)
    assert not controls(draft.to[0].name or "")
    assert not stored["bcc"] and not stored["cc"]
    shown = reply.preview(ENGLISH, draft, draft_id).text
    assert not controls(shown.replace("\n", " "))
    await mailbox.submit_draft(draft_id, chosen[0].id)
    [sent] = await asyncio.to_thread(smtp_sink.wait_for, lambda r: mark in r.body_text(), 1,
                                     WAIT_S)
    assert sent.rcpt_tos == confirm_addresses(shown) == (BOB,)
