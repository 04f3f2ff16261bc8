"""Replying to a mail from the chat (issue #25; reference §7.13).

`/reply <email_id> <text>`, or a Telegram reply to a notification (the replied-to message's
keyboard names the mail: its buttons are signed, `pipeline.buttons.replied_mail`), makes a
draft through the mail source (`draft_reply`, a `mail.source.ReplySender`) and shows it with
Send and Cancel buttons; `send` and `cancel` are what those buttons do (`pipeline.buttons`,
claimed once per draft), and `expire_drafts` destroys the drafts not sent within
`keys.REPLY_DRAFT_MAX_AGE_S` (the worker's maintenance pass).

The draft: the identity whose address the mail was sent to (`pick_identity`), `To` from the
original's Reply-To or From, the subject with one `Re: `, `In-Reply-To` and `References`, the
owner's text as its only (text/plain) part, in Drafts with `$draft`. Every one of those values
comes from a stranger's mail: it is cleaned (`messageweave.untrusted`) before it goes into a
header, and a recipient that is not a bare addr-spec is refused (`reply_bad_address`). The
confirm step shows the bare addresses first, the names the sender gave after them, and a
warning when the reply goes to a Reply-To that is not the From. The owner's words are
carried by their stream entry, which is deleted when it finishes (§7.4), and by the draft in
the mailbox; Redis keeps ids and times only (`store.drafts`).
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from messageweave.chat import replies
from messageweave.config.live import NotConfigured
from messageweave.config.model import BusinessConfig
from messageweave.mail.errors import MailError, MailRefused
from messageweave.mail.records import Address, Draft, Identity, MailText
from messageweave.mail.source import ReplySender
from messageweave.pipeline import reading
from messageweave.pipeline.reading import ChatMessage
from messageweave.store import callbacks, drafts, keys
from messageweave.store.keys import AccountKeys
from messageweave.store.redis import Redis
from messageweave.untrusted import SUBJECT_MAX_CHARS, clean, message_ids, plain_address

log = logging.getLogger(__name__)

SEND, CANCEL = "d", "x"  # the draft's buttons (`pipeline.buttons`); both claim `button:d:`
CLAIM = SEND
PREVIEW_LINES = 5
PREVIEW_CHARS = 500
EXPIRY_BATCH = 20
EXPIRY_OWNER = "expiry"  # who holds a draft's claim while the maintenance pass destroys it
# One reply prefix; `reply_subject` strips them one by one. No two quantifiers share a run of
# spaces (`\s*(\[\d+\])?\s*` did: quadratic on `Re` and 8k spaces).
_PREFIX = re.compile(r"(?:re|aw|sv|回复|答复) ?(?:\[\d+\] ?)?[:：] ?", re.IGNORECASE)

SignDraftButton = Callable[[str, str], str | None]
"""The signed callback_data of a draft's button: (action, draft id) → data, None: too long."""


@dataclass(frozen=True)
class ReplyRequest:
    email_id: str
    text: str
    chat_id: int
    entry_id: str  # the stream entry that carries the words: its retry finds its draft


# --- the draft ------------------------------------------------------------------------------


def reply_subject(subject: str | None) -> str:
    """One `Re: `: any run of leading Re:/RE:/Aw:/回复： (Outlook's, German, Nordic, Chinese
    clients' prefixes) becomes a single one; the subject cleaned (`untrusted.clean`: one line,
    its whitespace runs single spaces, which is what keeps `_PREFIX` linear)."""
    rest, start = clean(subject, SUBJECT_MAX_CHARS), 0
    while (found := _PREFIX.match(rest, start)) is not None:
        start = found.end()
    return "Re: " + rest[start:]


def pick_identity(identities: list[Identity], source: MailText,
                  login: str) -> tuple[Identity, Address] | None:
    """The identity to answer as, and the From address: the identity whose address the mail
    was sent to (To, then Cc; a `*@domain` identity for an address of its domain); else, when
    the server names no address for its identities (Cyrus 3.6 answers `email: ""`), the
    recipient whose local part is the login's (what such a server permits); else the
    account's first identity with an address. None when there is none at all."""
    sent_to = [a for a in (*source.to, *source.cc) if a.email]
    named = [i for i in identities if i.email and not i.email.startswith("*@")]
    for address in sent_to:
        for identity in named:
            if identity.email.lower() == (address.email or "").lower():
                return identity, Address(identity.name or None, identity.email)
    for address in sent_to:
        for identity in identities:
            domain = identity.email[1:].lower() if identity.email.startswith("*@") else None
            if domain and (address.email or "").lower().endswith(domain):
                return identity, Address(identity.name or None, address.email)
    blank = [i for i in identities if not i.email]
    if blank:
        local = login.split("@", 1)[0].lower()
        for address in sent_to:
            if (address.email or "").split("@", 1)[0].lower() == local:
                return blank[0], Address(blank[0].name or None, address.email)
        if "@" in login:
            return blank[0], Address(blank[0].name or None, login)
    return (named[0], Address(named[0].name or None, named[0].email)) if named else None


def draft_of(source: MailText, sender: Address, text: str) -> Draft:
    """The reply's draft, its header values cleaned (names, subject) and filtered (the
    Message-IDs: `<id>`-shaped ones only). The addresses are the caller's to check
    (`bad_recipient`)."""
    to = tuple(Address(clean(a.name) or None, a.email)
               for a in source.reply_to or source.sender)
    references = message_ids((*source.references, *source.message_ids))
    return Draft(sender, to, reply_subject(source.subject), message_ids(source.message_ids),
                 references, text)


def bad_recipient(draft: Draft) -> str | None:
    """The first recipient that is not a bare addr-spec, cleaned for the chat ("—" when the
    mail names none at all); None when every one is."""
    if not draft.to:
        return "—"
    for address in draft.to:
        if plain_address(address.email) is None:
            return clean(address.email) or "—"
    return None


def other_sender(source: MailText) -> str | None:
    """The From addresses, when the reply goes to a Reply-To that is not among them: what the
    confirm step warns of. None when there is no Reply-To or it is the sender's."""
    senders = {(a.email or "").lower() for a in source.sender}
    if not source.reply_to or {(a.email or "").lower() for a in source.reply_to} <= senders:
        return None
    return ", ".join(clean(a.email) for a in source.sender if a.email) or "—"


def preview(cfg: BusinessConfig, draft: Draft, draft_id: str, sign: SignDraftButton,
            other: str | None = None) -> ChatMessage:
    """The draft as the chat sees it: the bare addresses it goes to, then the names their
    sender gave (cleaned), a warning when it goes to a Reply-To that is not the sender
    (`other`: the From addresses), the subject, the first lines; Send and Cancel."""
    table = replies.texts(cfg.bot_language)
    lines = draft.text.strip().splitlines()
    shown = "\n".join(lines[:PREVIEW_LINES])
    if len(shown) > PREVIEW_CHARS or len(lines) > PREVIEW_LINES:
        shown = shown[:PREVIEW_CHARS].rstrip() + replies.ELLIPSIS
    to = ", ".join(clean(a.email) for a in draft.to if a.email) or "—"
    head = [table["reply_draft"], table["read_to"].format(value=to)]
    names = [name for a in draft.to if (name := clean(a.name))]
    if names:
        head.append(table["reply_names"].format(value=", ".join(names)))
    if other is not None:
        head.append(table["reply_to_differs"].format(sender=other))
    text = "\n".join((*head, table["read_subject"].format(value=draft.subject), "", shown))
    send, cancel = sign(SEND, draft_id), sign(CANCEL, draft_id)
    if send is None or cancel is None:
        return ChatMessage(text)
    return ChatMessage(text, (((table["button_send"], send), (table["button_cancel"], cancel)),))


async def draft_reply(mailbox: ReplySender, redis: Redis, names: AccountKeys,
                      cfg: BusinessConfig,
                      request: ReplyRequest, *, now: float, sign: SignDraftButton) -> ChatMessage:
    """Make the draft (once per stream entry) and its preview; or the answer that says why
    not (no text, no submission on this server, the mail gone, no identity, refused)."""
    table = replies.texts(cfg.bot_language)
    if not request.text.strip():
        return ChatMessage(table["reply_empty"])
    if not await mailbox.can_submit():
        return ChatMessage(table["reply_off"])
    source = await mailbox.reply_source(request.email_id)
    if source is None:
        return ChatMessage(table["notice_gone"])
    chosen = pick_identity(await mailbox.identities(), source, await mailbox.username())
    if chosen is None:
        return ChatMessage(table["reply_no_identity"])
    identity, sender = chosen
    draft = draft_of(source, sender, request.text)
    bad = bad_recipient(draft)
    if bad is not None:
        log.warning("a reply was refused: its recipient is not a plain address")
        return ChatMessage(table["reply_bad_address"].format(address=bad))
    draft_id = await drafts.made_by(redis, names, request.entry_id) if request.entry_id else None
    if draft_id is None:
        try:
            draft_id = await mailbox.create_draft(draft)
        except MailRefused as exc:
            log.warning("a reply draft was refused: %s", exc.reason)
            return ChatMessage(table["reply_refused"].format(reason=exc.reason))
        await drafts.remember(redis, names, draft_id, entry_id=request.entry_id,
                              chat_id=request.chat_id, identity_id=identity.id, now=now)
        log.info("a reply draft was made")
    return preview(cfg, draft, draft_id, sign, other_sender(source))


# --- Send, Cancel ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Done:
    """What a Send or Cancel press did: the press's notice, and a message for the chat."""

    notice: str
    message: str | None = None
    settled: bool = True  # the draft is no longer one: its buttons go


async def send(mailbox: ReplySender, redis: Redis, names: AccountKeys, cfg: BusinessConfig,
               draft_id: str, record: drafts.DraftRecord, *, now: float) -> Done:
    """Submit the draft, claimed (`button:d:`) by the caller. A retried press whose first
    attempt submitted it (the answer lost, the worker killed) finds it sent: `$draft` is gone
    (Cyrus keeps no final EmailSubmission to look up), and it is not submitted again."""
    table = replies.texts(cfg.bot_language)
    if not await mailbox.can_submit():
        return Done(table["reply_off"], settled=False)
    state = await mailbox.draft_state(draft_id)
    if state is None:
        await _settle(redis, names, draft_id, "cancelled", now)
        return Done(table["notice_draft_gone"])
    sent_at: str | None = None
    if state == "draft":
        try:
            sent_at = await mailbox.submit_draft(draft_id, record.identity_id)
        except MailRefused as exc:
            log.warning("a reply's submission was refused: %s", exc.reason)
            return Done(table["notice_send_refused"].format(reason=exc.reason), settled=False)
        log.info("a reply was submitted")
    at = sent_at or _rfc3339(now)
    await _settle(redis, names, draft_id, "sent", now, at)
    when = reading.local_date(at, cfg.timezone) or at
    return Done(table["notice_reply_sent"], table["reply_sent"].format(time=when))


async def cancel(mailbox: ReplySender, redis: Redis, names: AccountKeys, cfg: BusinessConfig,
                 draft_id: str, *, now: float) -> Done:
    """Destroy the draft (claimed by the caller); a mail that is no longer a draft (sent
    meanwhile) is left alone."""
    table = replies.texts(cfg.bot_language)
    state = await mailbox.draft_state(draft_id)
    if state == "sent":
        await _settle(redis, names, draft_id, "sent", now)
        return Done(table["notice_sent"])
    if state == "draft":
        await mailbox.destroy_draft(draft_id)
    await _settle(redis, names, draft_id, "cancelled", now)
    return Done(table["notice_cancelled"])


async def _settle(redis: Redis, names: AccountKeys, draft_id: str, outcome: drafts.DraftEnd,
                  now: float, at: str | None = None) -> None:
    await drafts.settle(redis, names, draft_id, outcome, at or _rfc3339(now))
    await callbacks.finish(redis, names, CLAIM, draft_id)


def _rfc3339(unix: float) -> str:
    return dt.datetime.fromtimestamp(int(unix), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- expiry ---------------------------------------------------------------------------------


async def expire_drafts(redis: Redis, names: AccountKeys,
                        mail: Callable[[], Awaitable[ReplySender]], *, now: float) -> int:
    """Destroy the account's drafts (`names`, whose mailbox `mail` is) made more than
    `REPLY_DRAFT_MAX_AGE_S` ago and never sent; how many were. Each is taken out of the
    account's `reply:drafts` by one instance (ZREM) and claimed like a press, so a Send under
    way keeps it; when the mailbox cannot be reached it is put back for the next pass."""
    done = 0
    for draft_id, created in await drafts.older_than(redis, names, now - keys.REPLY_DRAFT_MAX_AGE_S,
                                                     EXPIRY_BATCH):
        if not await drafts.take(redis, names, draft_id):
            continue  # another instance has it
        claim = await callbacks.claim(redis, names, CLAIM, draft_id, EXPIRY_OWNER)
        if claim != "claimed":
            if claim == "busy":
                await drafts.put_back(redis, names, draft_id, created)
            continue
        try:
            mailbox = await mail()
            state = await mailbox.draft_state(draft_id)
            if state == "draft":
                await mailbox.destroy_draft(draft_id)
        except (MailError, NotConfigured) as exc:
            await callbacks.release(redis, names, CLAIM, draft_id, EXPIRY_OWNER)
            await drafts.put_back(redis, names, draft_id, created)
            log.warning("an old reply draft could not be destroyed: %s", type(exc).__name__)
            return done
        await _settle(redis, names, draft_id, "sent" if state == "sent" else "expired", now)
        done += 1
    return done
