"""Read and the attachments (issue #25): a mail's text sent into the chat, and its files.

`read_pages` is what the Read button and `/read <email_id>` answer: the headers (From, Reply-To,
To, Cc, Date, Subject; each cleaned by `untrusted.clean`, as the attachments' names are in the
list and on their buttons) and the attachments' list, then the text (the text/plain parts, else
the HTML converted, by the mail source), split under Telegram's 4,096 UTF-16 units
into at most `MAX_MESSAGES` messages; a longer text ends with "… N more characters, open it in
your mail client". The last message carries one button per attachment (`pipeline.buttons`).

Nothing of the text is stored or logged: it is read from the mail source for this answer,
handed to the ledger's send as the reply's text (which holds no text in Redis: §1.3.1) and
forgotten; a retry reads the mail again. An attachment is downloaded into memory
(`MailReader.download`, for JMAP `JmapClient.download_blob`, at
most `MAX_UPLOAD_BYTES`, the Bot API's upload limit) and uploaded at once (`send_attachment`);
never written to disk or Redis.
"""

from __future__ import annotations

import datetime as dt
import functools
import mimetypes
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass

from messageweave.chat import texts
from messageweave.chat.telegram import (
    MAX_MESSAGE_UTF16,
    Keyboard,
    TelegramClient,
    split_text,
    utf16_len,
)
from messageweave.config.model import BusinessConfig
from messageweave.mail.records import Address, Attachment, MailText
from messageweave.mail.source import MailReader
from messageweave.pipeline.governor import ChatLanes
from messageweave.untrusted import SUBJECT_MAX_CHARS, clean

MAX_MESSAGES = 3
# How much text is read from the server (bytes of UTF-8): far more than three messages show,
# so "N more characters" is exact for all but very long mails (then "N+").
TEXT_CAP_BYTES = 256 * 1024
MAX_UPLOAD_BYTES = 50 * 1024 * 1024  # the Bot API's upload limit (sendDocument)
MAX_PHOTO_BYTES = 10 * 1024 * 1024  # sendPhoto's limit: a larger image goes as a document
PHOTO_TYPES = frozenset({"image/jpeg", "image/png"})
UPLOAD_TIMEOUT_S = 300.0
MAX_ATTACHMENT_BUTTONS = 20
MAX_FILENAME_CHARS = 128
MAX_LABEL_CHARS = 40
_NOTE_RESERVE_UTF16 = 160  # room kept in the last message for the "… N more" line
_UNSAFE_NAME = re.compile(r'[\\/:*?"<>|]')


@dataclass(frozen=True)
class ChatMessage:
    """One message a press or a command answers with: a reply's draft, a notice."""

    text: str
    keyboard: Keyboard | None = None


@dataclass(frozen=True)
class ReadPages:
    """A Read's messages, and the labels of its attachment buttons (by the attachment's index
    in the mail) for under the last one; the buttons' signed data is `pipeline.buttons`'s."""

    texts: list[str]
    attachments: list[tuple[int, str]]


def allowed(cfg: BusinessConfig, chat_id: int) -> bool:
    """Only the configured chats may read a mail (the webhook's allowlist checks it first)."""
    return chat_id == cfg.telegram_chat_id or chat_id in cfg.chat_allowlist


async def read_pages(source: MailReader, cfg: BusinessConfig,
                     email_id: str) -> ReadPages | None:
    """The messages of a Read; None when the mailbox does not have the mail."""
    mail = await source.read_email(email_id, text_cap=TEXT_CAP_BYTES)
    if mail is None:
        return None
    return render(mail, cfg)


def render(mail: MailText, cfg: BusinessConfig) -> ReadPages:
    table = texts.table(cfg.bot_language)
    lines = [table["read_from"].format(value=_names(mail.sender))]
    if mail.reply_to:
        lines.append(table["read_reply_to"].format(value=_names(mail.reply_to)))
    if mail.to:
        lines.append(table["read_to"].format(value=_names(mail.to)))
    if mail.cc:
        lines.append(table["read_cc"].format(value=_names(mail.cc)))
    date = local_date(mail.sent_at or mail.received_at, cfg.timezone)
    if date:
        lines.append(table["read_date"].format(value=date))
    subject = clean(mail.subject, SUBJECT_MAX_CHARS) or table["read_no_subject"]
    lines.append(table["read_subject"].format(value=subject))
    if mail.attachments:
        lines.append(table["read_attachments"])
        lines.extend(table["read_attachment_line"].format(
            name=display_name(a, table), size=size_text(a.size)) for a in mail.attachments)
    body = mail.text.strip() or table["summary_no_text"]
    pages = paginate("\n".join(lines) + "\n\n" + body, mail.text_truncated, table["read_more"])
    labels = [(index, table["button_attachment"].format(
                  name=_cut(display_name(attachment, table), MAX_LABEL_CHARS)))
              for index, attachment in enumerate(mail.attachments[:MAX_ATTACHMENT_BUTTONS])]
    return ReadPages(pages, labels)


def paginate(text: str, truncated: bool, more: str) -> list[str]:
    """`text` in at most `MAX_MESSAGES` messages under Telegram's limit; cut, the last one ends
    with `more` naming how many characters were left out (`N+` when the server's copy was cut
    too)."""
    chunks = split_text(text)
    if len(chunks) <= MAX_MESSAGES and not truncated:
        return chunks
    kept = chunks[:MAX_MESSAGES]
    if len(chunks) > MAX_MESSAGES or utf16_len(kept[-1]) > MAX_MESSAGE_UTF16 - _NOTE_RESERVE_UTF16:
        kept[-1] = split_text(kept[-1], MAX_MESSAGE_UTF16 - _NOTE_RESERVE_UTF16)[0]
    position = 0
    for chunk in kept:
        found = text.find(chunk, position)
        position = (found if found >= 0 else position) + len(chunk)
    left = len(text[position:].strip())
    count = f"{max(left, 1)}+" if truncated else str(left)
    kept[-1] = f"{kept[-1]}\n\n{more.format(count=count)}"
    return kept


def size_text(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / (1024 * 1024):.1f} MB"


def megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):.1f}"


def display_name(attachment: Attachment, table: Mapping[str, str]) -> str:
    """The attachment's name as the Read list and its button show it: cleaned."""
    return clean(attachment.name) or table["read_unnamed"]


def safe_filename(attachment: Attachment) -> str:
    """The name the file is uploaded with: no path, no control or reserved characters, no
    leading dot, at most `MAX_FILENAME_CHARS` (the extension kept); an unnamed part gets
    `attachment` and the extension of its MIME type."""
    name = (attachment.name or "").replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join("_" if unicodedata.category(c).startswith("C") else c for c in name)
    name = _UNSAFE_NAME.sub("_", name).strip().lstrip(".").strip()
    if not name:
        name = "attachment" + (mimetypes.guess_extension(attachment.type) or "")
    if len(name) > MAX_FILENAME_CHARS:
        stem, dot, ext = name.rpartition(".")
        if dot and 0 < len(ext) <= 16:
            name = stem[:MAX_FILENAME_CHARS - len(ext) - 1] + "." + ext
        else:
            name = name[:MAX_FILENAME_CHARS]
    return name


def as_photo(attachment: Attachment) -> bool:
    return attachment.type in PHOTO_TYPES and 0 < attachment.size <= MAX_PHOTO_BYTES


async def send_attachment(source: MailReader, telegram: TelegramClient, lanes: ChatLanes,
                          thread_id: int | None, attachment: Attachment) -> int:
    """Download the attachment (into memory, bounded) and upload it to the chat of `lanes`,
    once they allow it (a file is a message: it counts against the chat's rate); the message
    id. Raises `MailTooLarge` (the server's bytes passed the limit its size claimed to be
    under), `MailError`, `TelegramSendError`."""
    name = safe_filename(attachment)
    content = await source.download(attachment, name, max_bytes=MAX_UPLOAD_BYTES)
    upload = functools.partial(
        telegram.send_file, lanes.chat_id, content, name, attachment.type,
        photo=as_photo(attachment) and len(content) <= MAX_PHOTO_BYTES, thread_id=thread_id,
        timeout_s=UPLOAD_TIMEOUT_S)
    del content  # `upload` holds the one reference, dropped below, failure or not
    try:
        return await lanes.call(upload)
    finally:
        del upload


def _names(addresses: tuple[Address, ...]) -> str:
    return ", ".join(str(a) for a in addresses if str(a)) or "—"


def local_date(value: str | None, timezone: str) -> str | None:
    """An RFC 3339 time from the server in `timezone`, the zone named (None for none)."""
    if not value:
        return None
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        return value
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return texts.zoned_time(int(moment.timestamp()), timezone)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + texts.ELLIPSIS
