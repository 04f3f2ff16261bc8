"""The mail source: what the pipeline, the chat and the admin routes need of a mailbox, in one
protocol whatever the server speaks (the way httpx's client holds a `BaseTransport` and never
asks which one).

`MailSource` is three small protocols: `MailReader` (the mails a notification, a digest, a
route, a trace, a search, Read and a summary need), `MailActions` (the buttons' Mark read and
Archive) and `ReplySender` (a reply's draft, its Send and Cancel). `mail.jmap.JmapClient` is
one (`mail/jmap/source.py` adds the methods JMAP had no name for); `services.Peers.mail` builds
the one in force, the only place that knows which protocol is configured.

What the caller may rely on:
- an email id, a mailbox id, an attachment's `blob_id` and a draft id are opaque strings the
  source made (a JMAP id; an IMAP source's id names mailbox, UIDVALIDITY and UID): compared,
  stored and handed back, never taken apart;
- the records are `mail.records` (no JMAP state, property name or mailbox id shape in them);
- a failure raises a `mail.errors.MailError`: `MailUnreachable` (the server out of reach, for
  now), `MailAuthError`, `MailRefused` (one change refused for good), `MailTooLarge` (a
  download past its limit); `MailError.source` names the protocol.

The watching side (new mail since a cursor, the gap audit, the push in force) is
`mail.watch.MailWatch`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from messageweave.mail.records import (
    Attachment,
    Draft,
    DraftState,
    EmailMeta,
    Identity,
    MailText,
    SearchResult,
)


class MailReader(Protocol):
    """Reading mail: metadata, text, attachments, search."""

    @property
    def account_id(self) -> str:
        """The account the source's ids belong to (a stream entry names it; the dedup keys
        carry it). Known once the source has connected."""

    async def metas(self, email_ids: Sequence[str], *, brief: bool = False) -> list[EmailMeta]:
        """The mails `email_ids`, in that order, the unknown ones left out. `brief`: only what
        a route reads (sender, subject, date, mailboxes) may be filled."""

    async def mail_with_text(self, email_id: str, *, text_max_bytes: int) -> EmailMeta | None:
        """One mail with its text (`EmailMeta.text`, at most `text_max_bytes` of UTF-8, HTML
        converted); None when the server does not have it."""

    async def mailbox_roles(self, mailbox_ids: frozenset[str]) -> frozenset[str]:
        """The special-use roles (lower case: `inbox`, `archive`, …) of the mailboxes
        `mailbox_ids` (an `EmailMeta.mailbox_ids`); may be cached for a minute."""

    async def newest(self, roles: Iterable[str], limit: int
                     ) -> list[tuple[EmailMeta, frozenset[str]]]:
        """The newest `limit` mails of the mailboxes with one of `roles` (none of Drafts, Sent,
        Junk or Trash), newest first, each brief with its mailboxes' roles."""

    async def subject_matches(self, text: str, limit: int) -> list[EmailMeta]:
        """At most `limit` mails whose subject holds `text`, newest first, brief."""

    async def notify_mailbox_ids(self, roles: Iterable[str]) -> frozenset[str]:
        """The ids of the mailboxes a new mail is notified from, for `roles`."""

    async def search(self, text: str, limit: int = 10) -> SearchResult:
        """A text search over the whole mailbox, newest first, with snippets where it can."""

    async def read_email(self, email_id: str, *, text_cap: int) -> MailText | None:
        """One mail as Read shows it (its text cut at `text_cap` bytes); None when gone."""

    async def attachments(self, email_id: str) -> list[Attachment] | None:
        """The mail's attachments (no bytes); None when gone."""

    async def download(self, attachment: Attachment, name: str, *, max_bytes: int) -> bytes:
        """The attachment's bytes, in memory; `MailTooLarge` as soon as more than `max_bytes`
        arrived."""


class MailActions(Protocol):
    """Changing one mail. Each is False when the server does not have the mail and raises
    `MailRefused` when it refuses the change for another reason."""

    async def mark_seen(self, email_id: str) -> bool:
        """The mail marked read."""

    async def archive(self, email_id: str) -> bool:
        """The mail moved to the archive mailbox (made when there is none)."""


class ReplySender(Protocol):
    """A reply from the chat: the draft, then its Send (once) or its Cancel."""

    async def can_submit(self) -> bool:
        """Whether the account can send at all (replies are off otherwise)."""

    async def reply_source(self, email_id: str) -> MailText | None:
        """What a reply needs of the original: its addresses, subject and Message-IDs."""

    async def identities(self) -> list[Identity]:
        """The addresses the account may send as."""

    async def username(self) -> str:
        """The account's login, what a reply is sent as when no identity says better."""

    async def create_draft(self, draft: Draft) -> str:
        """The draft stored (in Drafts); its id."""

    async def draft_state(self, email_id: str) -> DraftState | None:
        """`draft` while it waits, `sent` once it was sent, None when it is gone: what a
        retried Send reads before sending again."""

    async def submit_draft(self, email_id: str, identity_id: str) -> str | None:
        """The draft sent as `identity_id`, moved to Sent; the time it was sent, if known."""

    async def destroy_draft(self, email_id: str) -> None:
        """The draft removed (nothing when it is gone)."""


class MailSource(MailReader, MailActions, ReplySender, Protocol):
    """Everything the chat side uses of a mailbox."""
