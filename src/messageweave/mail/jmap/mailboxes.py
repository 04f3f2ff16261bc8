"""Which JMAP mailboxes notify: the notify and excluded sets of a mailbox list, and the
`Email/query` filter "in one of these mailboxes". The reconcile, the gap auditor and the
`MailSource` methods (`source`) judge a mail by them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from messageweave.config.model import EXCLUDED_ROLES
from messageweave.mail.jmap.models import Mailbox


def mailbox_sets(boxes: Sequence[Mailbox], roles: Iterable[str]
                 ) -> tuple[frozenset[str], frozenset[str]]:
    """(the notify mailboxes, the excluded ones): the ids of the boxes whose role is one of
    `roles` (any case; Drafts / Sent / Junk / Trash never notify), and of the boxes with one of
    those excluded roles. A mail notifies when it is in a notify box and in no excluded one."""
    wanted = frozenset(r.lower() for r in roles) - EXCLUDED_ROLES
    notify = frozenset(b.id for b in boxes if b.role and b.role.lower() in wanted)
    excluded = frozenset(b.id for b in boxes if b.role and b.role.lower() in EXCLUDED_ROLES)
    return notify, excluded


def in_any_mailbox(mailbox_ids: Iterable[str]) -> dict[str, Any]:
    """An `Email/query` filter: in at least one of `mailbox_ids` (at least one id)."""
    boxes: list[dict[str, Any]] = [{"inMailbox": m} for m in sorted(mailbox_ids)]
    return boxes[0] if len(boxes) == 1 else {"operator": "OR", "conditions": boxes}
