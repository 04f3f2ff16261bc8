"""What the JMAP client returns: the session, mailboxes, email metadata and pages, changes,
search results and push subscriptions. Plain frozen dataclasses; `parse` and the method
families build them from the server's JSON."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from messageweave.mail.jmap.errors import JmapMethodError


@dataclass(frozen=True)
class JmapSession:
    """The parts of the session resource (RFC 8620 §2) this client uses; URLs are absolute."""

    url: str
    api_url: str
    download_url: str
    upload_url: str
    event_source_url: str
    state: str
    username: str
    capabilities: Mapping[str, Any]
    accounts: Mapping[str, Any]
    primary_accounts: Mapping[str, str]
    max_objects_in_get: int
    max_calls_in_request: int


@dataclass(frozen=True)
class Mailbox:
    id: str
    name: str
    role: str | None
    parent_id: str | None = None


# What RFC 8621 §2.2 lets Mailbox/changes report in `updatedProperties` (else it is null).
MAILBOX_COUNTS = frozenset({"totalEmails", "unreadEmails", "totalThreads", "unreadThreads"})


@dataclass(frozen=True)
class MailboxList:
    """Mailbox/get ids=null: every mailbox, and the Mailbox state it was read at."""

    state: str
    mailboxes: list[Mailbox]


@dataclass(frozen=True)
class Changes:
    """A `Foo/changes` answer (RFC 8620 §5.2): the ids changed from `old_state` to `new_state`."""

    old_state: str
    new_state: str
    has_more: bool
    created: list[str]
    updated: list[str]
    destroyed: list[str]


@dataclass(frozen=True)
class EmailChanges(Changes):
    """Email/changes."""


@dataclass(frozen=True)
class MailboxChanges(Changes):
    """Mailbox/changes. `updated_properties` is a list only when nothing but the counts of the
    `updated` mailboxes changed (RFC 8621 §2.2); else None."""

    updated_properties: list[str] | None = None

    @property
    def counts_only(self) -> bool:
        """No mailbox was created or destroyed and none changed but for its counts: every id,
        name, role and parent read at `old_state` still holds at `new_state`."""
        if self.has_more or self.created or self.destroyed:
            return False
        return not self.updated or (self.updated_properties is not None
                                    and set(self.updated_properties) <= MAILBOX_COUNTS)


@dataclass(frozen=True)
class EmailQueryResult:
    ids: list[str]
    query_state: str
    position: int
    total: int | None
    can_calculate_changes: bool


@dataclass(frozen=True)
class EmailMeta:
    """What the assistant needs of one email.

    `sender` is "Name <addr>" (or the bare address) of the first From address. `received_at` is
    Unix seconds. `text` is set only when fetched: the text body parts joined in `textBody` order,
    text/html ones converted to text (`body.text_body`), capped at `body_max_bytes` (then, or
    when the server or the converter cut a part, `text_truncated` is true).
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
class ChangesPage:
    """One request: Email/changes, the Email/get of its `created` ids (in `created` order), then
    a look at the mailboxes — `mailboxes` when it was a Mailbox/get, `mailbox_changes` when it
    was a Mailbox/changes (None when the server could not answer it, e.g.
    `cannotCalculateChanges`)."""

    changes: EmailChanges
    created: list[EmailMeta]
    mailboxes: MailboxList | None = None
    mailbox_changes: MailboxChanges | None = None


@dataclass(frozen=True)
class EmailPage:
    """Email/query + Email/get in one request: the ids in query order and their emails."""

    ids: list[str]
    query_state: str
    total: int | None
    emails: list[EmailMeta]


@dataclass(frozen=True)
class SearchSnippet:
    """SearchSnippet/get (RFC 8621 §5): matched terms wrapped in `<mark>`; None if no match."""

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
    snippet_error: JmapMethodError | None = field(default=None, compare=False)

    def snippet(self, email_id: str) -> SearchSnippet | None:
        return next((s for s in self.snippets if s.email_id == email_id), None)


@dataclass(frozen=True)
class PushSubscription:
    id: str
    expires: str | None  # UTCDate; None = no expiry (or, with expires_known False, not told)
    expires_known: bool = True


@dataclass(frozen=True)
class PushSubscriptionLookup:
    found: dict[str, PushSubscription]
    not_found: list[str]
