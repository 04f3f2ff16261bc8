"""The inline buttons under a notification (issue #16): Summary, Mark read, Archive; and
(issue #25) Read, whose reply carries one button per attachment (`pipeline.reading`).

`notification_keyboard` is what every notification is sent with; `handle_press` is what the
worker does with a press (`callback_query`, queued on `stalwart:telegram` by `/webhook/tg`).

A button's `callback_data` is signed, so a forged press cannot act on another mail: the action
letter, then 16 characters of HMAC-SHA256 (base64url, 96 bits) over `{action}:{email_id}` with
a key derived from `telegram_webhook_secret`, then the email id. Whoever cannot forge the webhook
cannot forge a button; changing the secret makes the buttons already sent answer "no longer
valid". Telegram allows 64 bytes, so a mail whose id is longer than `MAX_EMAIL_ID_BYTES` gets no
buttons (Cyrus's ids are 25 characters; a 36-character UUID still fits).

A reply draft's Send (`d`) and Cancel (`x`) buttons (issue #25, `draft_keyboard`) are signed
the same way but name the draft's email id instead of the original's: `verify` reads them as a
`DraftButton`, and a press of one is the draft's business (`pipeline.draft.press`). A Telegram
reply to a notification carries the notification's keyboard (`reply_to_message.reply_markup`):
`replied_mail` reads the mail's id from its signed data.

An attachment button (`f`) also names the attachment: `f`, the MAC over `f:{index}:{email_id}`,
one character of the base64url alphabet for the index in the mail's `attachments` (0-63), then
the id; so its mail id may be one character shorter (`MAX_FILE_EMAIL_ID_BYTES`).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass

from messageweave.chat import texts
from messageweave.chat.telegram import Keyboard, SendOptions, TelegramClient, TelegramSendError
from messageweave.config.live import NotConfigured
from messageweave.config.model import BusinessConfig
from messageweave.mail.errors import MailError, MailRefused, MailTooLarge
from messageweave.mail.source import MailActions, MailReader
from messageweave.pipeline import draft, owners, reading, summarize
from messageweave.pipeline.governor import ChatLanes, bot_id
from messageweave.services import AccountServices
from messageweave.store import callbacks

log = logging.getLogger(__name__)

SUMMARY, READ, ARCHIVE = "s", "r", "a"
ACTIONS = (SUMMARY, READ, ARCHIVE)  # the notification's first row
READ_MAIL, FILE = "v", "f"  # issue #25: Read (its own row), an attachment of a Read reply
DRAFT_ACTIONS = (draft.SEND, draft.CANCEL)  # a reply draft's buttons: they name the draft
SIGNED = (*ACTIONS, READ_MAIL, FILE, *DRAFT_ACTIONS)
# What reads the mailbox or sends from it: an owner's press only (`pipeline.owners`, issue #32).
# Mark read and Archive stay with whoever was shown the notification.
OWNERS_ONLY = (SUMMARY, READ_MAIL, FILE, *DRAFT_ACTIONS)
# What Mark read and Archive leave behind, so a second press finds them done.
LASTING = (READ, ARCHIVE)
MAX_CALLBACK_BYTES = 64  # Telegram's limit on callback_data
MAC_CHARS = 16
MAX_EMAIL_ID_BYTES = MAX_CALLBACK_BYTES - 1 - MAC_CHARS
MAX_FILE_EMAIL_ID_BYTES = MAX_EMAIL_ID_BYTES - 1
_INDEX = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_KEY_LABEL = b"messageweave/buttons/v1"
_EMAIL_ID = re.compile(r"[A-Za-z0-9_-]+")  # RFC 8620 §1.2: the base64url alphabet
_NOT_MODIFIED = "message is not modified"

_LABELS = {SUMMARY: "button_summary", READ: "button_read", ARCHIVE: "button_archive"}
_NOTICES = {READ: "notice_read", ARCHIVE: "notice_archive"}


# --- signing ---------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _key(secret: str) -> bytes:
    """The buttons' own key: the webhook secret never signs anything else with itself."""
    return hmac.new(secret.encode(), _KEY_LABEL, hashlib.sha256).digest()


def _mac(cfg: BusinessConfig, action: str, email_id: str, part: int | None = None) -> str:
    signed = f"{action}:{email_id}" if part is None else f"{action}:{part}:{email_id}"
    digest = hmac.new(_key(cfg.telegram_webhook_secret), signed.encode(),
                      hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest[:12]).decode()


def callback_data(cfg: BusinessConfig, action: str, email_id: str,
                  part: int | None = None) -> str | None:
    """The signed `callback_data` of one button (of an attachment button, `part` is its
    index); None when it does not fit in 64 bytes."""
    limit = MAX_EMAIL_ID_BYTES if action != FILE else MAX_FILE_EMAIL_ID_BYTES
    if len(email_id) > limit or not _EMAIL_ID.fullmatch(email_id):
        return None
    if action != FILE:
        return f"{action}{_mac(cfg, action, email_id)}{email_id}"
    if part is None or not 0 <= part < len(_INDEX):
        return None
    return f"{action}{_mac(cfg, action, email_id, part)}{_INDEX[part]}{email_id}"


@dataclass(frozen=True)
class Button:
    """A button about a mail: a notification's, Read's, an attachment's."""

    action: str
    email_id: str
    part: int | None = None  # an attachment button's index in the mail's attachments


@dataclass(frozen=True)
class DraftButton:
    """Send (`draft.SEND`) or Cancel (`draft.CANCEL`) under a reply draft's preview."""

    action: str
    draft_id: str  # the draft's email id


def verify(cfg: BusinessConfig, data: str) -> Button | DraftButton | None:
    """The button `data` names, if we signed it; None for anything else."""
    action, mac, rest = data[:1], data[1:1 + MAC_CHARS], data[1 + MAC_CHARS:]
    part: int | None = None
    if action == FILE:
        if not rest or rest[0] not in _INDEX:
            return None
        part, rest = _INDEX.index(rest[0]), rest[1:]
    if action not in SIGNED or callback_data(cfg, action, rest, part) is None:
        return None
    # bytes: compare_digest raises on a `str` with non-ASCII characters (a forged press)
    if not hmac.compare_digest(mac.encode(), _mac(cfg, action, rest, part).encode()):
        return None
    return DraftButton(action, rest) if action in DRAFT_ACTIONS else Button(action, rest, part)


def replied_mail(cfg: BusinessConfig, data: str | None) -> str | None:
    """The mail a message's button `data` names, if we signed it: a notification's or a Read
    reply's button, not a draft's (whose id is the draft's)."""
    button = verify(cfg, data) if data else None
    return button.email_id if isinstance(button, Button) else None


def draft_keyboard(cfg: BusinessConfig, draft_id: str) -> Keyboard | None:
    """Send and Cancel under a reply draft's preview (None: the id is too long)."""
    table = texts.table(cfg.bot_language)
    send, cancel = (callback_data(cfg, action, draft_id) for action in DRAFT_ACTIONS)
    if send is None or cancel is None:
        return None
    return (((table["button_send"], send), (table["button_cancel"], cancel)),)


def notification_keyboard(cfg: BusinessConfig, email_id: str,
                          done: frozenset[str] = frozenset()) -> Keyboard | None:
    """The keyboard under the notification of `email_id` (None: the id is too long), in the
    bot's language; the actions in `done` show their done state."""
    table = texts.table(cfg.bot_language)
    row = []
    for action in ACTIONS:
        data = callback_data(cfg, action, email_id)
        if data is None:
            return None
        label = _LABELS[action] + ("_done" if action in done else "")
        row.append((table[label], data))
    read = callback_data(cfg, READ_MAIL, email_id) if cfg.read_in_chat else None
    if read is None:
        return (tuple(row),)
    return (tuple(row), ((table["button_read_mail"], read),))


# --- a press ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Press:
    """What the worker needs of a `callback_query` (`pipeline.ingress.parse_update`)."""

    entry_id: str  # the stream entry: its retries find their own claim
    callback_id: str
    chat_id: int
    data: str
    message_id: int | None = None
    thread_id: int | None = None
    user_id: int | None = None  # who pressed (`owners.sender_of`)

    @classmethod
    def of(cls, entry_id: str, fields: Mapping[str, str]) -> Press:
        def number(name: str) -> int | None:
            try:
                return int(fields.get(name, ""))
            except ValueError:
                return None

        return cls(entry_id, fields["callback_id"], number("chat_id") or 0,
                   fields.get("callback_data", ""), number("message_id"), number("thread_id"),
                   owners.sender_of(fields))


@dataclass(frozen=True)
class ButtonReply:
    """A message the press answers with (Summary): sent by the worker like any reply."""

    chat_id: int
    text: str
    options: SendOptions


async def handle_press(press: Press, svc: AccountServices,
                       cfg: BusinessConfig) -> list[ButtonReply]:
    """Do what the pressed button says, answer the press (always), and show the new state.

    Raises `MailError` / `NotConfigured` when the mailbox cannot be reached, so the entry is
    retried (a claim it took is given back first); the press is answered at once with the
    notice that it will be (the retry's own answer is then refused by Telegram, and the
    edited keyboard shows the outcome)."""
    runtime = svc.runtime
    if runtime is None:
        raise NotConfigured
    telegram, table = runtime.telegram, texts.table(cfg.bot_language)
    button = verify(cfg, press.data)
    if button is None:
        log.info("a button press with data we did not sign was refused")
        await _answer(telegram, press, table["notice_invalid"])
        return []
    if button.action in OWNERS_ONLY and not owners.may_act(cfg, press.user_id):
        log.info("a button press from a user who is not an owner was refused")
        await _answer(telegram, press, table["not_owner"])
        return []
    try:
        if isinstance(button, DraftButton):
            return await _draft(press, button, svc, cfg, telegram)
        if button.action == SUMMARY:
            return await _summary(press, button, svc, cfg, telegram)
        if button.action in (READ_MAIL, FILE):
            if not cfg.read_in_chat or not reading.allowed(cfg, press.chat_id):
                refused = "read_off" if not cfg.read_in_chat else "notice_invalid"
                log.info("a Read or attachment press was refused (%s)", refused)
                await _answer(telegram, press, table[refused])
                return []
            if button.action == READ_MAIL:
                return await _read(press, button, svc, cfg, telegram)
            return await _file(press, button, svc, cfg, telegram)
        await _lasting(press, button, svc, cfg, telegram)
    except (MailError, NotConfigured):
        await _answer(telegram, press, table["notice_retry"])
        raise
    return []


async def _summary(press: Press, button: Button, svc: AccountServices, cfg: BusinessConfig,
                   telegram: TelegramClient) -> list[ButtonReply]:
    """The `/summary <id>` path (`summarize`): without consent, the consent hint."""
    mail = await summarize.fetch_mail(await svc.mail(), button.email_id)
    table = texts.table(cfg.bot_language)
    if mail is None:
        await _answer(telegram, press, table["notice_gone"])
        return []
    await _answer(telegram, press, None)  # the spinner stops while the summary is made
    text = await summarize.summary_text(mail, press.chat_id, redis=svc.redis, names=svc.keys,
                                        config=cfg,
                                        outbound=svc.config.outbound, now=time.time())
    return [ButtonReply(press.chat_id, text, SendOptions(thread_id=press.thread_id))]


async def read_replies(source: MailReader, cfg: BusinessConfig, email_id: str,
                       chat_id: int, thread_id: int | None) -> list[ButtonReply] | None:
    """The messages of a Read of `email_id` (the button's and `/read`'s), the attachment
    buttons under the last; None when the mailbox does not have the mail."""
    found = await reading.read_pages(source, cfg, email_id)
    if found is None:
        return None
    signed = ((label, callback_data(cfg, FILE, email_id, index))
              for index, label in found.attachments)
    keyboard = tuple(((label, data),) for label, data in signed if data is not None) or None
    last = len(found.texts) - 1
    return [ButtonReply(chat_id, text, SendOptions(thread_id=thread_id,
                                                   keyboard=keyboard if n == last else None))
            for n, text in enumerate(found.texts)]


async def _read(press: Press, button: Button, svc: AccountServices, cfg: BusinessConfig,
                telegram: TelegramClient) -> list[ButtonReply]:
    """Read: the mail's headers and text as reply messages (not deduplicated: each press is a
    new request, as `/read` twice is)."""
    found = await read_replies(await svc.mail(), cfg, button.email_id, press.chat_id,
                               press.thread_id)
    if found is None:
        await _answer(telegram, press, texts.table(cfg.bot_language)["notice_gone"])
        return []
    await _answer(telegram, press, None)
    return found


async def _file(press: Press, button: Button, svc: AccountServices, cfg: BusinessConfig,
                telegram: TelegramClient) -> list[ButtonReply]:
    """An attachment: refused above the upload limit before anything is downloaded; else
    claimed per (mail, part), downloaded into memory and uploaded once."""
    table = texts.table(cfg.bot_language)
    source = await svc.mail()
    found = await source.attachments(button.email_id)
    if found is None or button.part is None or button.part >= len(found):
        await _answer(telegram, press, table["notice_gone"])
        return []
    attachment = found[button.part]
    too_large = table["notice_too_large"].format(size=reading.megabytes(attachment.size))
    if attachment.size > reading.MAX_UPLOAD_BYTES:
        await _answer(telegram, press, too_large)
        return []
    owner, part = press.entry_id, attachment.part_id
    claim = await callbacks.claim(svc.redis, svc.keys, FILE, button.email_id, owner, part=part)
    if claim != "claimed":
        await _answer(telegram, press, table["notice_sent" if claim == "done" else "notice_busy"])
        return []
    await _answer(telegram, press, None)  # the spinner stops while the file is fetched
    try:
        await reading.send_attachment(source, telegram, _lanes(svc, press), press.thread_id,
                                      attachment)
    except MailTooLarge:
        await callbacks.release(svc.redis, svc.keys, FILE, button.email_id, owner, part=part)
        return [ButtonReply(press.chat_id, too_large, SendOptions(thread_id=press.thread_id))]
    except TelegramSendError as exc:
        log.warning("an attachment upload failed: %s", exc.failure_class)
        if exc.maybe_sent:  # the owner may have it: a second press must not send it again
            await callbacks.finish(svc.redis, svc.keys, FILE, button.email_id, part=part)
        else:
            await callbacks.release(svc.redis, svc.keys, FILE, button.email_id, owner, part=part)
        return [ButtonReply(press.chat_id, table["notice_upload_failed"],
                            SendOptions(thread_id=press.thread_id))]
    except BaseException:
        await callbacks.release(svc.redis, svc.keys, FILE, button.email_id, owner, part=part)
        raise
    await callbacks.finish(svc.redis, svc.keys, FILE, button.email_id, part=part)
    return []


async def _draft(press: Press, button: DraftButton, svc: AccountServices, cfg: BusinessConfig,
                 telegram: TelegramClient) -> list[ButtonReply]:
    """Send or Cancel of a reply draft (`draft.press`: the checks, the claim, the mailbox),
    answered; a settled draft's preview loses its buttons."""
    done = await draft.press(svc.mail, svc.redis, svc.keys, cfg, button.action, button.draft_id,
                             chat_id=press.chat_id, owner=press.entry_id)
    await _answer(telegram, press, done.notice)
    if done.settled:
        await _drop_keyboard(telegram, press, svc)
    if done.message is None:
        return []
    return [ButtonReply(press.chat_id, done.message, SendOptions(thread_id=press.thread_id))]


async def _drop_keyboard(telegram: TelegramClient, press: Press, svc: AccountServices) -> None:
    """The settled draft's preview loses its buttons (best effort, like `_show`)."""
    if press.message_id is None:
        return
    message_id = press.message_id
    try:
        await _lanes(svc, press).call(
            lambda: telegram.edit_message_reply_markup(press.chat_id, message_id, None))
    except TelegramSendError as exc:
        if _NOT_MODIFIED not in exc.description:
            log.info("editMessageReplyMarkup failed: %s", exc.failure_class)


async def _lasting(press: Press, button: Button, svc: AccountServices, cfg: BusinessConfig,
                   telegram: TelegramClient) -> None:
    """Mark read or Archive, once: a press that finds the work done (or under way) only
    answers and shows the state."""
    table = texts.table(cfg.bot_language)
    claim = await callbacks.claim(svc.redis, svc.keys, button.action, button.email_id,
                                  press.entry_id)
    if claim != "claimed":
        notice = "notice_already" if claim == "done" else "notice_busy"
        await _answer(telegram, press, table[notice])
        await _show(telegram, press, svc, cfg, button.email_id)
        return
    try:
        found = await _act(await svc.mail(), button)
    except MailRefused as exc:  # refused for good (e.g. forbidden): a retry would not help
        await callbacks.release(svc.redis, svc.keys, button.action, button.email_id, press.entry_id)
        log.warning("a button's mailbox change was refused: %s", exc.reason)
        await _answer(telegram, press, table["notice_failed"])
        return
    except Exception:
        await callbacks.release(svc.redis, svc.keys, button.action, button.email_id, press.entry_id)
        raise
    if not found:
        await callbacks.release(svc.redis, svc.keys, button.action, button.email_id, press.entry_id)
        await _answer(telegram, press, table["notice_gone"])
        return
    await callbacks.finish(svc.redis, svc.keys, button.action, button.email_id)
    await _answer(telegram, press, table[_NOTICES[button.action]])
    await _show(telegram, press, svc, cfg, button.email_id)


async def _act(source: MailActions, button: Button) -> bool:
    """The mailbox work of a button; False when the mailbox no longer has the mail."""
    if button.action == READ:
        return await source.mark_seen(button.email_id)
    return await source.archive(button.email_id)


async def _answer(telegram: TelegramClient, press: Press, text: str | None) -> None:
    """answerCallbackQuery. Best effort: a press already answered (a retried entry) or too old
    is refused by Telegram, and the work is not undone for it. Not behind the governor: it is
    no message in the chat, and the press's spinner (and the query's short life) waits on it
    (reference §7.6)."""
    try:
        await telegram.answer_callback_query(press.callback_id, text)
    except TelegramSendError as exc:
        log.info("answerCallbackQuery failed: %s", exc.failure_class)


async def _show(telegram: TelegramClient, press: Press, svc: AccountServices, cfg: BusinessConfig,
                email_id: str) -> None:
    """editMessageReplyMarkup with the done state of Mark read and Archive (best effort)."""
    if press.message_id is None:
        return
    done = await callbacks.done_actions(svc.redis, svc.keys, LASTING, email_id)
    message_id, shown = press.message_id, notification_keyboard(cfg, email_id, done)
    try:
        await _lanes(svc, press).call(
            lambda: telegram.edit_message_reply_markup(press.chat_id, message_id, shown))
    except TelegramSendError as exc:
        if _NOT_MODIFIED not in exc.description:
            log.info("editMessageReplyMarkup failed: %s", exc.failure_class)


def _lanes(svc: AccountServices, press: Press) -> ChatLanes:
    """The rate governor's lanes of the pressed chat (a keyboard edit or an upload counts
    against its rate like a reply)."""
    runtime = svc.runtime
    token = runtime.config.bot_token if runtime is not None else ""
    return ChatLanes(svc.redis, bot_id(token), press.chat_id)
