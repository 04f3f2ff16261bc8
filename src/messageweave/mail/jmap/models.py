"""What the JMAP client returns: the session, mailboxes, pages, changes and push
subscriptions (the email metadata and search results are `mail.records`, re-exported here).
Plain frozen dataclasses; `parse` and the method families build them from the server's JSON."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from messageweave.mail.records import EmailMeta, SearchResult, SearchSnippet


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
class PushSubscription:
    id: str
    expires: str | None  # UTCDate; None = no expiry (or, with expires_known False, not told)
    expires_known: bool = True


@dataclass(frozen=True)
class PushSubscriptionLookup:
    found: dict[str, PushSubscription]
    not_found: list[str]


__all__ = ["MAILBOX_COUNTS", "ChangesPage", "EmailChanges", "EmailMeta", "EmailPage",
           "EmailQueryResult", "JmapSession", "Mailbox", "MailboxChanges", "MailboxList",
           "PushSubscription", "PushSubscriptionLookup", "SearchResult", "SearchSnippet"]
