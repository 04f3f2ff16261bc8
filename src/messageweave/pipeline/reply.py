"""Replying to a mail from the chat (issue #25; reference §7.13).

`/reply <email_id> <text>`, or a Telegram reply to a notification (the replied-to message's
keyboard names the mail: its buttons are signed, `pipeline.buttons.replied_mail`), makes a
draft through the mail source (`draft_reply`, a `mail.source.ReplySender`) and shows it with
Send and Cancel buttons (`pipeline.buttons.draft_keyboard`). What those buttons do, and the
expiry of the drafts never sent, is the draft's life after it is made: `pipeline.draft`.

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

import logging
import re
from dataclasses import dataclass

from messageweave.chat import texts
from messageweave.config.model import BusinessConfig
from messageweave.mail.errors import MailRefused
from messageweave.mail.records import Address, Draft, Identity, MailText
from messageweave.mail.source import ReplySender
from messageweave.pipeline import buttons
from messageweave.pipeline.reading import ChatMessage
from messageweave.store import drafts
from messageweave.store.keys import AccountKeys
from messageweave.store.redis import Redis
from messageweave.untrusted import SUBJECT_MAX_CHARS, clean, message_ids, plain_address

log = logging.getLogger(__name__)

PREVIEW_LINES = 5
PREVIEW_CHARS = 500
# One reply prefix; `reply_subject` strips them one by one. No two quantifiers share a run of
# spaces (`\s*(\[\d+\])?\s*` did: quadratic on `Re` and 8k spaces).
_PREFIX = re.compile(r"(?:re|aw|sv|回复|答复) ?(?:\[\d+\] ?)?[:：] ?", re.IGNORECASE)

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


def preview(cfg: BusinessConfig, draft: Draft, draft_id: str,
            other: str | None = None) -> ChatMessage:
    """The draft as the chat sees it: the bare addresses it goes to, then the names their
    sender gave (cleaned), a warning when it goes to a Reply-To that is not the sender
    (`other`: the From addresses), the subject, the first lines; Send and Cancel."""
    table = texts.table(cfg.bot_language)
    lines = draft.text.strip().splitlines()
    shown = "\n".join(lines[:PREVIEW_LINES])
    if len(shown) > PREVIEW_CHARS or len(lines) > PREVIEW_LINES:
        shown = shown[:PREVIEW_CHARS].rstrip() + texts.ELLIPSIS
    to = ", ".join(clean(a.email) for a in draft.to if a.email) or "—"
    head = [table["reply_draft"], table["read_to"].format(value=to)]
    names = [name for a in draft.to if (name := clean(a.name))]
    if names:
        head.append(table["reply_names"].format(value=", ".join(names)))
    if other is not None:
        head.append(table["reply_to_differs"].format(sender=other))
    text = "\n".join((*head, table["read_subject"].format(value=draft.subject), "", shown))
    return ChatMessage(text, buttons.draft_keyboard(cfg, draft_id))


async def draft_reply(mailbox: ReplySender, redis: Redis, names: AccountKeys,
                      cfg: BusinessConfig,
                      request: ReplyRequest, *, now: float) -> ChatMessage:
    """Make the draft (once per stream entry) and its preview; or the answer that says why
    not (no text, no submission on this server, the mail gone, no identity, refused)."""
    table = texts.table(cfg.bot_language)
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
    return preview(cfg, draft, draft_id, other_sender(source))
