"""Read and the attachments (issue #25), end to end: a multipart mail in Cyrus, its notification
with the Read button, the press (or `/read <id>`) played by the Bot API emulator through our
HTTPS webhook, the worker's replies and the files it uploads read back from the emulator
(`/control/sentFiles` keeps their bytes)."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import email.utils
import logging
import os
import struct
import time
import zlib
from email.message import EmailMessage
from email.policy import SMTP
from typing import Any

import pytest

from messageweave.config.model import parse_wire
from messageweave.mail.jmap import JmapClient
from messageweave.pipeline import buttons, reading
from messageweave.pipeline.governor import Governor, bot_id
from messageweave.store import keys
from tests.helpers import WAIT_S, keyboard, press, redis_text
from tests.peers.telegram import SentFile, SentMessage
from tests.served import ServedApp

BODY_MARK = "Zebra-quokka-7731"  # in the mail's text: must never reach Redis or a log line
PDF = (b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\n" + os.urandom(3000)
       + b"\n%%EOF\n")


def png() -> bytes:
    """A real 2x2 PNG (sendPhoto takes it as a photo)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    raw = b"".join(b"\x00" + b"\xff\x00\x00" * 2 for _ in range(2))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


PNG = png()


def multipart(subject: str, body: str, *, attachments: bool = True) -> bytes:
    msg = EmailMessage(policy=SMTP)
    msg["From"] = "Bob Example <bob@example.org>"
    msg["To"] = "Alice <alice@localhost>"
    msg["Cc"] = "Carol <carol@example.org>"
    msg["Subject"] = subject
    msg["Date"] = email.utils.format_datetime(dt.datetime(2025, 1, 2, 9, 30, tzinfo=dt.UTC))
    msg["Message-ID"] = email.utils.make_msgid(domain="example.org")
    msg.set_content(body)
    if attachments:
        msg.add_attachment(PDF, maintype="application", subtype="pdf",
                           filename="../quarterly report.pdf")
        msg.add_attachment(PNG, maintype="image", subtype="png", filename="logo.png")
    return msg.as_bytes()


async def notified(served: ServedApp, raw: bytes) -> tuple[str, SentMessage]:
    """A mail appended to Cyrus and queued; its notification."""
    email_id = served.cyrus.append(raw).email_id
    await served.enqueue_mail(email_id)
    cfg = parse_wire(served.wire)
    deadline = time.monotonic() + WAIT_S
    while True:
        for message in await served.emulator.sent_messages(served.token):
            named = [buttons.verify(cfg, data) for _, data in keyboard(message)]
            if buttons.Button(buttons.READ, email_id) in named:
                return email_id, message
        assert time.monotonic() < deadline, "no notification"
        await asyncio.sleep(0.05)


def read_data(served: ServedApp, message: SentMessage) -> str:
    cfg = parse_wire(served.wire)
    [data] = [d for _, d in keyboard(message)
              if (b := buttons.verify(cfg, d)) is not None and b.action == buttons.READ_MAIL]
    return data


async def messages_after(served: ServedApp, message_id: int, count: int,
                         chat: int | None = None) -> list[SentMessage]:
    """The first `count` messages the bot sent to the chat after `message_id`."""
    deadline = time.monotonic() + WAIT_S
    while True:
        later = [m for m in await served.emulator.sent_messages(served.token, chat or served.chat)
                 if m.message_id > message_id]
        if len(later) >= count:
            await asyncio.sleep(0.3)  # and no more than that
            later = [m for m in await served.emulator.sent_messages(
                served.token, chat or served.chat) if m.message_id > message_id]
            return later
        assert time.monotonic() < deadline, f"{len(later)} of {count} messages"
        await asyncio.sleep(0.05)


async def files(served: ServedApp, count: int) -> list[SentFile]:
    deadline = time.monotonic() + WAIT_S
    while True:
        sent = await served.emulator.sent_files(served.token)
        if len(sent) >= count:
            return sent
        assert time.monotonic() < deadline, f"{len(sent)} of {count} files"
        await asyncio.sleep(0.05)


async def test_read_gives_headers_text_and_byte_identical_attachments(
    served: ServedApp,
) -> None:
    """Catches a Read that leaves out a header or the text, takes more than 3 messages, lists
    no attachment, or whose attachment buttons deliver other bytes, another name (the path in
    the mail's filename kept) or another MIME type than the mail's."""
    email_id, message = await notified(served, multipart("Q1 numbers", f"Hello Alice,\n"
                                                                      f"{BODY_MARK} inside."))
    assert [t for t, _ in keyboard(message)] == ["摘要", "标为已读", "归档", "阅读全文"]
    answer = await press(served, message, read_data(served, message))
    assert answer["text"] is None
    [reply] = await messages_after(served, message.message_id, 1)
    assert reply.text.startswith(
        "发件人：Bob Example <bob@example.org>\n收件人：Alice <alice@localhost>\n"
        "抄送：Carol <carol@example.org>\n日期：2025-01-02 18:30 (Asia/Tokyo)\n主题：Q1 numbers\n"
        "附件：\n- ../quarterly report.pdf（3.0 KB）\n- logo.png（")
    assert f"Hello Alice,\n{BODY_MARK} inside." in reply.text
    labels = keyboard(reply)
    assert [t for t, _ in labels] == ["📎 ../quarterly report.pdf", "📎 logo.png"]
    for _, data in labels:
        assert len(data.encode()) <= 64
        await press(served, reply, data)
    pdf, photo = sorted(await files(served, 2), key=lambda f: f.method)
    assert (pdf.method, pdf.filename, pdf.mime_type, pdf.data) == (
        "sendDocument", "quarterly report.pdf", "application/pdf", PDF)
    assert (photo.method, photo.filename, photo.mime_type, photo.data) == (
        "sendPhoto", "logo.png", "image/png", PNG)
    assert {pdf.chat_id, photo.chat_id} == {served.chat}
    assert await served.redis.get(keys.button_part(email_id, "2")) == "done"


async def test_a_long_mail_is_three_messages_and_says_how_much_is_left(
    served: ServedApp,
) -> None:
    """Catches a Read that floods the chat with a long mail's every message, or cuts it
    without saying how much was left out."""
    words = " ".join(f"word{n:05d}" for n in range(3000))  # 30,000 characters
    _, message = await notified(served, multipart("Long", words, attachments=False))
    await press(served, message, read_data(served, message))
    sent = await messages_after(served, message.message_id, 3)
    assert len(sent) == 3
    assert all(len(m.text) <= 4096 for m in sent)
    last = sent[-1].text
    assert last.endswith("个字符，请在邮件客户端中打开")
    shown = "".join(m.text for m in sent)
    left = int(last.rsplit("还有 ", 1)[1].split(" ", 1)[0])
    last_word = shown.rsplit("word", 1)[1][:5]
    assert abs(left - (len(words) - words.index(f"word{last_word}") - 9)) <= 3


async def test_a_long_mail_whose_second_message_failed_resumes_from_the_second(
    served: ServedApp,
) -> None:
    """Catches a retry that sends a long mail's Read again from its first message: the second
    sendMessage fails (500), and the entry's retry must resume where the ledger's
    `SendProgress` says it stopped, so each of the three messages reaches the chat once, in
    order. (This replaces a client-level test of `send_text(start_chunk=)`, a second resume
    mechanism production never used.)"""
    words = " ".join(f"word{n:05d}" for n in range(3000))  # 30,000 characters: 3 messages
    _, message = await notified(served, multipart("Resumed", words, attachments=False))
    before = (await served.emulator.api_calls(served.token, "sendMessage")).count
    await served.emulator.fail(token=served.token, method="sendMessage", error_code=500,
                               skip=1, times=1)
    await press(served, message, read_data(served, message))
    sent = await messages_after(served, message.message_id, 3)
    texts = [m.text for m in sent]
    assert len(texts) == 3 and "主题：Resumed" in texts[0], texts
    assert all("主题：Resumed" not in text for text in texts[1:]), texts
    first_words = [int(text.split("word", 1)[1][:5]) for text in texts]
    assert first_words == sorted(set(first_words)), first_words  # in order, none twice
    # Four calls: page 1, page 2 refused, then page 2 and page 3 (not page 1 again).
    assert (await served.emulator.api_calls(served.token, "sendMessage")).count == before + 4


async def test_read_command_gives_the_same_reply(served: ServedApp) -> None:
    """Catches `/read <id>` answering nothing, or without the attachment buttons."""
    email_id, message = await notified(served, multipart("By command", "Command body."))
    await served.say(f"/read {email_id}")
    [reply] = await messages_after(served, message.message_id, 1)
    assert "主题：By command" in reply.text and "Command body." in reply.text
    assert [t for t, _ in keyboard(reply)] == ["📎 ../quarterly report.pdf", "📎 logo.png"]


async def test_an_attachment_pressed_twice_is_sent_once(served: ServedApp) -> None:
    """Catches a second press (or the button under a Read made twice) uploading the file
    again: the send is claimed per (mail, part)."""
    _, message = await notified(served, multipart("Twice", "Two presses."))
    await press(served, message, read_data(served, message))
    [reply] = await messages_after(served, message.message_id, 1)
    pdf = keyboard(reply)[0][1]
    await press(served, reply, pdf)
    await files(served, 1)
    again = await press(served, reply, pdf)
    assert again["text"] == "已经发送过了"
    await asyncio.sleep(0.5)
    assert len(await served.emulator.sent_files(served.token)) == 1


async def test_an_attachment_pressed_under_a_429_pause_is_uploaded_after_it(
    served: ServedApp,
) -> None:
    """Catches (issue #38) an upload that went around the rate governor: a file is a message
    in the chat, so while a 429 holds the chat's lane (`Governor.pause`) the upload waits for
    the pause to end instead of meeting Telegram's flood wait."""
    _, message = await notified(served, multipart("Paused file", "A file under a 429."))
    await press(served, message, read_data(served, message))
    [reply] = await messages_after(served, message.message_id, 1)
    pause_s = 3.0
    paused_at_ms = time.time() * 1000
    await Governor(served.redis).pause(bot_id(served.token), served.chat, pause_s)
    await press(served, reply, keyboard(reply)[0][1])
    [pdf] = await files(served, 1)
    assert pdf.filename == "quarterly report.pdf"
    [upload_ms] = (await served.emulator.api_calls(served.token, "sendDocument")).times_ms
    assert upload_ms >= paused_at_ms + pause_s * 1000


async def test_an_oversized_attachment_is_refused_without_downloading(
    served: ServedApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Catches a file above the upload limit being downloaded (into memory) before it is
    refused, or refused without saying so. The limit is lowered to 1 KB here so that Cyrus
    holds a small mail: the PDF (3 KB) is then above it, the PNG below."""
    monkeypatch.setattr(reading, "MAX_UPLOAD_BYTES", 1024)
    downloads: list[str] = []
    real = JmapClient.download_blob

    async def counting(self: JmapClient, blob_id: str, *args: Any, **kw: Any) -> bytes:
        downloads.append(blob_id)
        return await real(self, blob_id, *args, **kw)

    monkeypatch.setattr(JmapClient, "download_blob", counting)
    _, message = await notified(served, multipart("Big", "A big one."))
    await press(served, message, read_data(served, message))
    [reply] = await messages_after(served, message.message_id, 1)
    answer = await press(served, reply, keyboard(reply)[0][1])
    assert answer["text"] == "文件太大（0.0 MB），请在邮件客户端中打开"
    assert downloads == []
    await press(served, reply, keyboard(reply)[1][1])
    [photo] = await files(served, 1)
    assert photo.data == PNG and len(downloads) == 1


async def test_read_in_chat_off_hides_the_button_and_refuses_the_command(
    served: ServedApp,
) -> None:
    """Catches `read_in_chat` off still offering Read, answering `/read`, or acting on a
    Read or attachment button sent while it was on."""
    email_id, before = await notified(served, multipart("Before", "Sent while on."))
    await press(served, before, read_data(served, before))
    [reply] = await messages_after(served, before.message_id, 1)
    await served.configure(read_in_chat=False)
    _, message = await notified(served, multipart("Off", "Not to be shown."))
    assert [t for t, _ in keyboard(message)] == ["摘要", "标为已读", "归档"]
    await served.say(f"/read {email_id}")
    [refusal] = await messages_after(served, message.message_id, 1)
    assert refusal.text == "已关闭在聊天中阅读邮件（设置 read_in_chat）"
    answer = await press(served, before, read_data(served, before))
    assert answer["text"] == "已关闭在聊天中阅读邮件（设置 read_in_chat）"
    answer = await press(served, reply, keyboard(reply)[0][1])
    assert answer["text"] == "已关闭在聊天中阅读邮件（设置 read_in_chat）"
    await asyncio.sleep(0.5)
    assert await served.emulator.sent_files(served.token) == []
    later = [m for m in await served.emulator.sent_messages(served.token)
             if m.message_id > refusal.message_id]
    assert later == []


async def test_a_strangers_chat_can_not_read(served: ServedApp) -> None:
    """Catches a chat outside the allowlist reading a mail, by `/read` or by pressing a
    Read button it got hold of (the data is signed, the chat is not)."""
    email_id, message = await notified(served, multipart("Private", "Not for strangers."))
    stranger = served.chat + 777
    # Refused at the webhook (403, or 204 so that Telegram does not resend it): never queued.
    status = await served.say(f"/read {email_id}", chat_id=stranger)
    assert status in (204, 403)
    pressed = await served.emulator.press_button(served.token, stranger, None,
                                                 read_data(served, message))
    assert pressed.status in (204, 403)
    await asyncio.sleep(0.5)
    assert await served.emulator.sent_messages(served.token, stranger) == []
    later = [m for m in await served.emulator.sent_messages(served.token)
             if m.message_id > message.message_id]
    assert later == []


async def test_no_body_text_or_attachment_byte_is_left_in_redis_or_the_logs(
    served: ServedApp, caplog: pytest.LogCaptureFixture
) -> None:
    """Catches a Read or an attachment send that stores or logs what it carried: after a Read
    and both files, every Redis key (strings, hashes, lists, sets, streams) and every log
    record is scanned for the body's marker and for the attachments' bytes."""
    caplog.set_level(logging.DEBUG)
    _, message = await notified(served, multipart("Scan me", f"Secret {BODY_MARK} text."))
    await press(served, message, read_data(served, message))
    [reply] = await messages_after(served, message.message_id, 1)
    assert BODY_MARK in reply.text
    for _, data in keyboard(reply):
        await press(served, reply, data)
    await files(served, 2)
    await asyncio.sleep(0.5)
    # The marker, the PDF's ASCII header, and both files in base64 (a binary value would not
    # even decode: the client reads UTF-8 and raises).
    needles = [BODY_MARK, "/Type /Catalog", base64.b64encode(PDF[:60]).decode()[:40],
               base64.b64encode(PNG).decode()[:40]]
    stored = await redis_text(served.redis)
    for needle in needles:
        assert needle not in stored
    logged = "\n".join(f"{r.getMessage()} {r.__dict__!r}" for r in caplog.records)
    for needle in needles:
        assert needle not in logged
