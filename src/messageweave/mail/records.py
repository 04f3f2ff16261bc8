"""What a mail source returns, the same for every protocol (`mail.source.MailSource`).

Plain frozen dataclasses. An email id, a mailbox id and an attachment's `blob_id` are opaque
strings the source made and takes back (a JMAP id, blob id and mailbox id; an IMAP source
names mailbox, UIDVALIDITY and UID in an email id): the pipeline compares and passes them on,
it never takes them apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from messageweave.mail.errors import MailError
from messageweave.untrusted import clean

DraftState = Literal["draft", "sent"]


@dataclass(frozen=True)
class EmailMeta:
    """What the assistant needs of one email.

    `sender` is "Name <addr>" (or the bare address) of the first From address. `received_at` is
    Unix seconds. `mailbox_ids` are the source's ids of the mailboxes holding it (what
    `MailSource.mailbox_roles` and `notify_mailbox_ids` speak of). `text` is set only when
    fetched: the text body parts joined in order, HTML converted to text (`body.text_body`),
    capped at the bytes asked for (then, or when the server or the converter cut a part,
    `text_truncated` is true).
    """

    id: str
    sender: str | None
    subject: str | None
    received_at: int | None
    mailbox_ids: frozenset[str]
    keywords: frozenset[str]
    preview: str
    text: str | None = None
    text_truncated: bool = False


@dataclass(frozen=True)
class SearchSnippet:
    """A search hit's matched terms wrapped in `<mark>`; None if no match."""

    email_id: str
    subject: str | None
    preview: str | None


@dataclass(frozen=True)
class SearchResult:
    """Text search. `ids` and `emails` are in result order (newest first); `snippets` may be
    empty when the server could not make them (then `snippet_error` says why)."""

    ids: list[str]
    emails: list[EmailMeta]
    snippets: list[SearchSnippet]
    snippet_error: MailError | None = field(default=None, compare=False)

    def snippet(self, email_id: str) -> SearchSnippet | None:
        return next((s for s in self.snippets if s.email_id == email_id), None)


@dataclass(frozen=True)
class Address:
    """One address of a mail. `name` is cleaned when parsed (`untrusted.clean`); `email` is
    as the server gave it, for `untrusted.plain_address` to judge before it is used."""

    name: str | None
    email: str | None

    def __str__(self) -> str:
        """`Name <email>`, both cleaned: what a chat message may show."""
        name, email = clean(self.name), clean(self.email)
        if name and email:
            return f"{name} <{email}>"
        return email or name


@dataclass(frozen=True)
class Attachment:
    """One attachment of a mail. `blob_id` is the source's handle on its bytes, handed back to
    `MailSource.download` (JMAP: the blob id)."""

    part_id: str
    blob_id: str
    name: str | None
    type: str  # the media type the mail gives it, lower-case, without parameters
    size: int  # bytes, as the server reports them (decoded)


@dataclass(frozen=True)
class MailText:
    """One mail as Read shows it. `text` is held only as long as the reply is made. The
    subject, the names and the attachments' names are cleaned (`untrusted.clean`), the
    Message-IDs kept only when `<id>`-shaped (`untrusted.message_ids`)."""

    id: str
    sender: tuple[Address, ...]
    to: tuple[Address, ...]
    cc: tuple[Address, ...]
    reply_to: tuple[Address, ...]
    subject: str | None
    sent_at: str | None  # the Date header (RFC 3339), else None
    received_at: str | None
    message_ids: tuple[str, ...]  # Message-ID, without angle brackets
    references: tuple[str, ...]
    text: str = ""
    text_truncated: bool = False
    attachments: tuple[Attachment, ...] = ()


@dataclass(frozen=True)
class Identity:
    """An address the account may send as. `id` is the source's own."""

    id: str
    name: str
    email: str  # may be empty (Cyrus 3.6) or `*@domain` (RFC 8621 §6.1)


@dataclass(frozen=True)
class Draft:
    """A reply to create: the owner's text is its only body part (text/plain)."""

    sender: Address
    to: tuple[Address, ...]
    subject: str
    in_reply_to: tuple[str, ...]
    references: tuple[str, ...]
    text: str
