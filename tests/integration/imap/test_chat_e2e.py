"""The chat on an IMAP mailbox, end to end (issue #33 "How it is checked"): the app served over
HTTPS against the real Dovecot and Cyrus's imapd, the Bot API emulator playing the owner
through our webhook. `/search` finds a body word, Read sends the text and byte-identical
attachments (nothing of the text kept in Redis or the log), Archive moves the mail to
`\\Archive`, a Telegram reply then Send reaches the submission sink once, threaded, and lands in
Sent; mail already there at the first pass is not notified; `POST /api/audit` reports nothing
missing after a burst and finds a mail whose claim was removed."""

from __future__ import annotations

import asyncio
import email.utils
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import redis.asyncio as aioredis

from messageweave.config.model import parse_wire
from messageweave.pipeline import buttons
from messageweave.store import keys
from tests.helpers import (
    ADMIN_KEY,
    WAIT_S,
    eventually,
    keyboard,
    press,
    redis_text,
    run_cli,
)
from tests.integration.imap.conftest import ImapPeer
from tests.integration.imap.test_idle import _ca_pem, _inbox_id, _raw, _watching
from tests.integration.imap.test_watch import _past_the_baseline
from tests.integration.telegram.test_read import PDF, PNG, files, messages_after, multipart
from tests.peers.cyrus import CyrusServer
from tests.peers.smtp import SubmissionSink, running_submission
from tests.peers.telegram import SentMessage, TelegramEmulator
from tests.served import ServedApp, served_over_https

# The sink's implicit-TLS listener requires AUTH without aiosmtpd's STARTTLS-only TLS check.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS"),
    pytest.mark.parametrize("imap_peer", ["dovecot-tls", "cyrus-starttls"], indirect=True),
]

BODY_MARK = "Okapi-harbour-5519"  # in the mail's text: must never reach Redis or a log line
ANSWER_MARK = "Heron-quarry-2287"  # in the owner's answer: must not stay in Redis or a log
_chats = iter(range(8_330_001, 8_339_999))


@pytest.fixture(scope="module")
def sink() -> Iterator[SubmissionSink]:
    with running_submission() as server:
        yield server


def imap_fields(peer: ImapPeer, sink: SubmissionSink) -> dict[str, Any]:
    """The wire's IMAP and SMTP fields for `peer`'s user, no periodic pass or audit."""
    sink.users[peer.user] = peer.password
    return {
        "mail_source": "imap", "imap_host": "127.0.0.1", "imap_port": peer.port,
        "imap_security": peer.security, "imap_username": peer.user,
        "imap_password": peer.password,
        "imap_ca_pem": _ca_pem(peer.ssl_context) + sink.ca_pem,
        "smtp_host": "127.0.0.1", "smtp_port": sink.tls_port, "smtp_security": "tls",
        "smtp_from": f"{peer.user}@example.org",
        "reconcile_interval_s": 0, "audit_interval_s": 0,
    }


@asynccontextmanager
async def served_on_imap(peer: ImapPeer, sink: SubmissionSink, redis: aioredis.Redis,
                         redis_url: str, cyrus: CyrusServer, emulator: TelegramEmulator,
                         ) -> AsyncIterator[ServedApp]:
    """The app on HTTPS, configured on `peer`'s IMAP account, the emulator's webhook, idling
    with its first catch-up done."""
    async with served_over_https(redis, redis_url, cyrus, emulator, telegram_chat_id=next(_chats),
                                 **imap_fields(peer, sink)) as app:
        registered = await app.client.post("/api/telegram/register-webhook", headers=app.admin,
                                           json={"callback_url": f"{app.url}/webhook/tg"})
        assert registered.status_code == 200, registered.text
        await _watching(app.client, redis, app.admin)
        yield app


@pytest.fixture
async def on_imap(imap_peer: ImapPeer, sink: SubmissionSink, redis_client: aioredis.Redis,
                  embedded_redis_url: str, cyrus: CyrusServer,
                  tls_emulator: TelegramEmulator) -> AsyncIterator[ServedApp]:
    imap_peer.deliver(_raw("already there before the first pass"))
    async with served_on_imap(imap_peer, sink, redis_client, embedded_redis_url, cyrus,
                              tls_emulator) as app:
        yield app


async def notification_of(app: ServedApp, email_id: str) -> SentMessage:
    cfg = parse_wire(app.wire)
    found: list[SentMessage] = []

    async def notified() -> bool:
        found[:] = [m for m in await app.emulator.sent_messages(app.token, app.chat)
                    if buttons.Button(buttons.READ, email_id)
                    in {buttons.verify(cfg, d) for _, d in keyboard(m)}]
        return bool(found)

    await eventually(notified, f"the notification of {email_id}", WAIT_S)
    [message] = found
    return message


def button(app: ServedApp, message: SentMessage, action: str) -> str:
    cfg = parse_wire(app.wire)
    [data] = [d for _, d in keyboard(message)
              if (b := buttons.verify(cfg, d)) is not None and b.action == action]
    return data


async def mailbox_of(peer: ImapPeer, attribute: str) -> list[tuple[set[str], bytes]]:
    """(flags, bytes) of every mail of the mailbox marked `attribute`, not `\\Deleted`."""
    async with peer.client() as client:
        name = await client.special_use(attribute)
        assert name is not None, attribute
        await client.select(name, readonly=True)
        uids = await client.uid_search("NOT", "DELETED")
        found = await client.uid_fetch(uids, ["UID", "FLAGS", "BODY.PEEK[]"]) if uids else {}
    return [(set(f.flags or ()), f.sections["BODY[]"] or b"") for f in found.values()]


async def test_search_read_and_archive_through_the_chat(
    imap_peer: ImapPeer, on_imap: ServedApp, caplog: pytest.LogCaptureFixture,
) -> None:
    """Catches, on IMAP: mail already there at the first pass notified; `/search` that misses
    a word of the body (a SEARCH on the headers only) or answers without the mail's id; Read
    that loses the text or an attachment's bytes, name or type (a BODY[] section read wrong, a
    transfer encoding not undone), or keeps the mail's text in Redis or the log; Archive that
    leaves the mail in INBOX or moves it elsewhere than `\\Archive`."""
    caplog.set_level(logging.DEBUG)
    app = on_imap
    imap_peer.deliver(multipart("Quarterly 季度报告 on IMAP",
                                f"Hello Alice,\n{BODY_MARK} inside, Grüße aus Zürich."))
    email_id = await _inbox_id(imap_peer)
    message = await notification_of(app, email_id)
    assert [m for m in await app.emulator.sent_messages(app.token, app.chat)
            if "already there" in m.text] == []

    assert "Quarterly 季度报告 on IMAP" in message.text, message.text
    await app.say(f"/search {BODY_MARK}")
    [answer] = await messages_after(app, message.message_id, 1)
    assert email_id in answer.text and "Quarterly 季度报告 on IMAP" in answer.text, answer.text
    await app.say("/search Zürich")
    [_, accented] = await messages_after(app, message.message_id, 2)
    assert email_id in accented.text, accented.text
    await app.say(f"/read {email_id}")
    [*_, by_command] = await messages_after(app, message.message_id, 3)
    assert f"{BODY_MARK} inside" in by_command.text, by_command.text
    answer = by_command

    await press(app, message, button(app, message, buttons.READ_MAIL))
    [reply] = await messages_after(app, answer.message_id, 1)
    assert reply.text.startswith("发件人：Bob Example <bob@example.org>\n"), reply.text
    assert f"Hello Alice,\n{BODY_MARK} inside, Grüße aus Zürich." in reply.text
    assert "主题：Quarterly 季度报告 on IMAP" in reply.text
    for _, data in keyboard(reply):
        await press(app, reply, data)
    pdf, photo = sorted(await files(app, 2), key=lambda f: f.method)
    assert (pdf.method, pdf.filename, pdf.mime_type, pdf.data) == (
        "sendDocument", "quarterly report.pdf", "application/pdf", PDF)
    assert (photo.method, photo.filename, photo.mime_type, photo.data) == (
        "sendPhoto", "logo.png", "image/png", PNG)

    await press(app, message, button(app, message, buttons.ARCHIVE))

    async def archived() -> bool:
        return any(BODY_MARK.encode() in raw
                   for _, raw in await mailbox_of(imap_peer, "\\Archive"))

    await eventually(archived, "the mail in \\Archive", WAIT_S)
    async with imap_peer.client() as client:
        await client.select("INBOX", readonly=True)
        inbox = await client.uid_search("NOT", "DELETED")
    assert len(inbox) == 1  # the mail of before the first pass only
    assert BODY_MARK not in await redis_text(app.redis)
    assert BODY_MARK not in caplog.text


def original(peer: ImapPeer, subject: str, message_id: str) -> bytes:
    return (f"From: Bob <bob@example.org>\r\nTo: {peer.user}@example.org\r\n"
            f"Subject: {subject}\r\nMessage-ID: {message_id}\r\n"
            f"References: <root-7@example.org>\r\n"
            f"Date: {email.utils.formatdate()}\r\n\r\nAre you in?\r\n").encode()


async def test_a_telegram_reply_then_send_reaches_the_sink_once_threaded_and_lands_in_sent(
    imap_peer: ImapPeer, on_imap: ServedApp, sink: SubmissionSink,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Catches, on IMAP: a Telegram reply to the notification that makes no draft (the reply
    not mapped to the mail), Send that submits nothing, twice, to the wrong address or without
    In-Reply-To / References (a new thread at Bob's), no copy in Sent, and the owner's answer
    kept in Redis or the log."""
    caplog.set_level(logging.DEBUG)
    app = on_imap
    subject = f"Dinner ({imap_peer.name})"
    message_id = email.utils.make_msgid(domain="example.org")
    imap_peer.deliver(original(imap_peer, subject, message_id))
    notification = await notification_of(app, await _inbox_id(imap_peer))
    delivery = await app.emulator.send_user_message(
        app.token, app.chat, f"Yes. {ANSWER_MARK}", reply_to_message_id=notification.message_id)
    assert delivery.status == 204, delivery
    [preview] = await messages_after(app, notification.message_id, 1)
    assert [t for t, _ in keyboard(preview)] == ["发送", "取消"], preview.text
    [send] = [d for t, d in keyboard(preview) if t == "发送"]
    await press(app, preview, send)

    def to_bob(r: Any) -> bool:
        return r.rcpt_tos == ("bob@example.org",) and f"Re: {subject}" in r.raw.decode()

    [got] = await asyncio.to_thread(sink.wait_for, to_bob, 1, WAIT_S)
    assert got.message["In-Reply-To"] == message_id
    assert got.message["References"].split() == ["<root-7@example.org>", message_id]
    assert ANSWER_MARK in got.body_text() and got.auth_user == imap_peer.user

    async def in_sent() -> list[set[str]]:
        return [flags for flags, raw in await mailbox_of(imap_peer, "\\Sent")
                if f"Re: {subject}".encode() in raw and ANSWER_MARK.encode() in raw]

    async def sent_copy() -> bool:
        return bool(await in_sent())

    await eventually(sent_copy, "the reply in Sent", WAIT_S)
    await press(app, preview, send)  # a second press sends nothing more
    assert len(sink.matching(to_bob)) == 1
    [flags] = await in_sent()
    assert "\\Seen" in flags
    assert [raw for _, raw in await mailbox_of(imap_peer, "\\Drafts")
            if ANSWER_MARK.encode() in raw] == []
    assert ANSWER_MARK not in await redis_text(app.redis)
    assert ANSWER_MARK not in caplog.text


async def test_the_audit_finds_nothing_missing_after_a_burst_then_a_removed_claim(
    imap_peer: ImapPeer, on_imap: ServedApp, embedded_redis_url: str,
) -> None:
    """Catches, through `POST /api/audit` and `messageweave audit` on IMAP: a burst the
    catch-up notified reported as missing (auditing with the JMAP client, or ids or the claim's
    account that do not match the catch-up's), and a mail whose claim was removed left
    unnoticed (the CLI's own services built from the stored IMAP wire)."""
    app = on_imap
    await _past_the_baseline(app.redis)
    for n in range(5):
        imap_peer.deliver(_raw(f"burst {n}"))

    async def queued() -> bool:
        return await app.redis.xlen(keys.STREAM_JMAP) >= 5

    await eventually(queued, "the burst enqueued", WAIT_S)
    ids = [await _inbox_id(imap_peer, i) for i in range(1, 6)]
    for email_id in ids:
        await notification_of(app, email_id)
    first = await app.client.post("/api/audit", headers=app.admin)
    assert first.status_code == 200, first.text
    assert first.json() == {"checked": 5, "missing": 0, "enqueued": 0}

    assert await app.redis.delete(keys.dedup_jmap(imap_peer.user, ids[2])) == 1
    healed = await app.client.post("/api/audit", headers=app.admin)
    assert healed.status_code == 200, healed.text
    assert healed.json() == {"checked": 5, "missing": 1, "enqueued": 1}

    assert await app.redis.delete(keys.dedup_jmap(imap_peer.user, ids[4])) == 1
    code, out = await run_cli("audit", REDIS_URL=embedded_redis_url,
                              CONFIG_ENCRYPTION_KEY=ADMIN_KEY)
    assert code == 3, out
    assert "5 checked, 1 missing, 1 re-enqueued" in out and ids[4] in out, out
