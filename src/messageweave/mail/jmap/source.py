"""What makes `JmapClient` a `mail.source.MailSource`: the source-neutral methods the pipeline
and the chat call, each one JMAP request or a few (the rest of the protocol — `search`,
`read_email`, `attachments`, the reply's methods — is the client's own).

A mail's mailbox roles (what a rule on `mailbox_role` looks at) come from the mailbox list,
kept per client for `ROLES_TTL_S` (`mailbox_roles`); a mailbox the list does not know (made
since) reads it again, at most every `ROLES_REFRESH_MIN_S`, and the calls that all need it
share one Mailbox/get.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from messageweave.mail.jmap.mail import NEWEST_FIRST, MailMethods
from messageweave.mail.jmap.mailboxes import in_any_mailbox, mailbox_sets
from messageweave.mail.jmap.models import Mailbox
from messageweave.mail.jmap.reading import ReadMethods
from messageweave.mail.records import Attachment, EmailMeta

ROLES_TTL_S = 60.0  # how long a client's mailbox list is trusted for rules on `mailbox_role`
ROLES_REFRESH_MIN_S = 2.0  # a mailbox the list does not know reads it again, at most this often
# What a route (the rules), a digest and a trace read of a mail: not the keywords and preview
# of `DEFAULT_EMAIL_PROPERTIES`, which a notification shows.
BRIEF_PROPERTIES = ("from", "subject", "receivedAt", "mailboxIds")
_TEXT_PROPERTIES = ("from", "subject", "receivedAt", "preview")  # what a summary reads
SEEN = "$seen"


@dataclass(frozen=True)
class _Listing:
    read_at: float  # time.monotonic() of the Mailbox/get
    roles: Mapping[str, str | None]  # mailbox id → its role, lower case (None: no role)


# Per client (a new configuration, a new client: a fresh read).
_listings: weakref.WeakKeyDictionary[SourceMethods, _Listing] = weakref.WeakKeyDictionary()
_reading: weakref.WeakKeyDictionary[SourceMethods, asyncio.Lock] = weakref.WeakKeyDictionary()


def roles_by_id(boxes: Iterable[Mailbox]) -> dict[str, str | None]:
    return {box.id: box.role.lower() if box.role else None for box in boxes}


def roles_in(roles: Mapping[str, str | None], mailbox_ids: Iterable[str]) -> frozenset[str]:
    return frozenset(role for box in mailbox_ids if (role := roles.get(box)))


def _stale(held: _Listing | None, mailbox_ids: frozenset[str]) -> bool:
    if held is None:
        return True
    age = time.monotonic() - held.read_at
    return age >= ROLES_TTL_S or (age >= ROLES_REFRESH_MIN_S
                                  and not mailbox_ids <= held.roles.keys())


def _listing_filter(notify: frozenset[str], excluded: frozenset[str]) -> dict[str, Any]:
    """In a notify mailbox and in none of Drafts / Sent / Junk / Trash (the reconcile's rule)."""
    where = in_any_mailbox(notify)
    if not excluded:
        return where
    return {"operator": "AND", "conditions": [
        where, {"operator": "NOT", "conditions": [{"inMailbox": b} for b in sorted(excluded)]}]}


class SourceMethods(MailMethods, ReadMethods):
    """The `MailSource` methods `JmapClient` adds to its JMAP ones."""

    async def metas(self, email_ids: Sequence[str], *, brief: bool = False) -> list[EmailMeta]:
        """Email/get of `email_ids` in that order (unknown ids left out); `brief`: only what
        routing reads (`BRIEF_PROPERTIES`)."""
        return await self.get_emails(email_ids, properties=BRIEF_PROPERTIES if brief else None)

    async def mail_with_text(self, email_id: str, *, text_max_bytes: int) -> EmailMeta | None:
        """One mail with its text body (`EmailMeta.text`, at most `text_max_bytes`)."""
        found = await self.get_emails([email_id], properties=_TEXT_PROPERTIES, fetch_text=True,
                                      body_max_bytes=text_max_bytes)
        return found[0] if found else None

    async def mailbox_roles(self, mailbox_ids: frozenset[str]) -> frozenset[str]:
        """The roles of the mailboxes `mailbox_ids`, from the mailbox list read at most
        `ROLES_TTL_S` ago (the module docstring)."""
        if not _stale(_listings.get(self), mailbox_ids):
            return roles_in(_listings[self].roles, mailbox_ids)
        async with _reading.setdefault(self, asyncio.Lock()):
            held = _listings.get(self)
            if _stale(held, mailbox_ids):
                held = _Listing(time.monotonic(), roles_by_id(await self.mailboxes()))
                _listings[self] = held
        assert held is not None
        return roles_in(held.roles, mailbox_ids)

    async def newest(self, roles: Iterable[str], limit: int
                     ) -> list[tuple[EmailMeta, frozenset[str]]]:
        """The newest `limit` mails a new mail would notify from (in a mailbox of `roles`, in
        none excluded), newest first, each `brief` with its mailboxes' roles."""
        boxes = await self.mailboxes()
        notify, excluded = mailbox_sets(boxes, roles)
        if not notify:
            return []
        page = await self.query_and_get(_listing_filter(notify, excluded), NEWEST_FIRST, limit,
                                        properties=BRIEF_PROPERTIES)
        by_id = roles_by_id(boxes)
        return [(meta, roles_in(by_id, meta.mailbox_ids)) for meta in page.emails]

    async def subject_matches(self, text: str, limit: int) -> list[EmailMeta]:
        """The mails whose subject holds `text` (the server's match), newest first, `brief`."""
        page = await self.query_and_get({"subject": text}, limit=limit,
                                        properties=BRIEF_PROPERTIES)
        return page.emails

    async def notify_mailbox_ids(self, roles: Iterable[str]) -> frozenset[str]:
        """The ids of the mailboxes a new mail notifies from, as the reconcile decides."""
        notify, _ = mailbox_sets(await self.mailboxes(), roles)
        return notify

    async def download(self, attachment: Attachment, name: str, *, max_bytes: int) -> bytes:
        """The attachment's bytes under `name` (`download_blob`: `BlobTooLarge` past
        `max_bytes`)."""
        return await self.download_blob(attachment.blob_id, attachment.type, name,
                                        max_bytes=max_bytes)

    async def mark_seen(self, email_id: str) -> bool:
        """`$seen` set; False when the server does not have the mail (`JmapSetError`)."""
        return await self.update_email(email_id, {f"keywords/{SEEN}": True})

    async def archive(self, email_id: str) -> bool:
        """Moved to the archive mailbox (made when there is none, `archive_mailbox`); False when
        the server does not have the mail."""
        archive = await self.archive_mailbox()
        return await self.update_email(email_id, {"mailboxIds": {archive: True}})

    async def username(self) -> str:
        """The session's user name (what a reply is sent as when no identity says better)."""
        return (await self.get_session()).username
