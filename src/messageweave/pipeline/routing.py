"""Where one mail's notification goes (issue #16): the first matching rule of `notify_rules`
decides the chat, the forum topic, silence or mute; quiet hours make it silent.

`route_for` is pure: the caller supplies the mail's facts (`MailFacts`: sender, subject, the
roles of its mailboxes) and, optionally, the time. Without one it asks `clock`, the pipeline's
one source of time for routing, which a test replaces to inject the time.

The roles of a mail's mailboxes come from the JMAP client's mailbox list, kept per client for
`ROLES_TTL_S` (`mailbox_roles`), and are read only when a rule looks at them (`needs_roles`),
so the push fast path gains no round trip otherwise.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import weakref
import zoneinfo
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from messageweave.config.features import MailFacts, first_match
from messageweave.config.model import BusinessConfig
from messageweave.mail.jmap import NEWEST_FIRST, EmailMeta, JmapClient, Mailbox
from messageweave.mail.reconcile import in_any_mailbox, mailbox_sets

ROLES_TTL_S = 60.0  # how long a client's mailbox list is trusted for rules on `mailbox_role`
ROLES_REFRESH_MIN_S = 2.0  # a mailbox the list does not know reads it again, at most this often
DRY_RUN_MAILS = 20
# What a route (the rules) and a notification read of a mail: the dry run and the digest fetch
# these, not the keywords and preview of `DEFAULT_EMAIL_PROPERTIES`.
MAIL_PROPERTIES = ("from", "subject", "receivedAt", "mailboxIds")


def wall_clock() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


# The time the pipeline routes at (quiet hours). Tests set it to inject the time.
clock: Callable[[], dt.datetime] = wall_clock


@dataclass(frozen=True)
class Route:
    chat_id: int
    thread_id: int | None = None
    silent: bool = False
    rule: str | None = None  # the name of the rule that decided; None: no rule matched
    muted: bool = False  # a `mute` rule matched: nothing is sent
    quiet: bool = False  # inside the quiet hours (which make a sent notification silent)

    @property
    def destination(self) -> tuple[int, int | None]:
        return self.chat_id, self.thread_id


def needs_roles(cfg: BusinessConfig) -> bool:
    """Whether some rule looks at mailbox roles (else the mailbox list need not be fetched)."""
    return any(rule.mailbox_role is not None for rule in cfg.notify_rules)


def facts_of(meta: EmailMeta, roles: frozenset[str] = frozenset()) -> MailFacts:
    return MailFacts(meta.sender, meta.subject, roles)


def local_now(cfg: BusinessConfig, now: dt.datetime | None = None) -> dt.datetime:
    """`now` (default: `clock()`) in the configured zone."""
    zone = zoneinfo.ZoneInfo(cfg.timezone)
    return (now or clock()).astimezone(zone)


def in_quiet_hours(cfg: BusinessConfig, now: dt.datetime | None = None) -> bool:
    return cfg.quiet_hours is not None and cfg.quiet_hours.contains(local_now(cfg, now))


def route_for(cfg: BusinessConfig, mail: MailFacts, now: dt.datetime | None = None) -> Route:
    """The decision for one mail at `now` (an aware datetime; default `clock()`)."""
    rule = first_match(cfg.notify_rules, mail)
    quiet = in_quiet_hours(cfg, now)
    if rule is None:
        return Route(cfg.telegram_chat_id, silent=quiet, quiet=quiet)
    if rule.action == "mute":
        return Route(cfg.telegram_chat_id, rule=rule.name, muted=True, quiet=quiet)
    chat = rule.chat_id if rule.chat_id is not None else cfg.telegram_chat_id
    return Route(chat, rule.thread_id, rule.silent or quiet, rule.name, quiet=quiet)


# ----------------------------------------------------------------------------- mailbox roles


@dataclass(frozen=True)
class _Listing:
    read_at: float  # time.monotonic() of the Mailbox/get
    roles: Mapping[str, str | None]  # mailbox id → its role, lower case (None: no role)


# Per client (a new configuration, a new client: a fresh read).
_listings: weakref.WeakKeyDictionary[JmapClient, _Listing] = weakref.WeakKeyDictionary()
_reading: weakref.WeakKeyDictionary[JmapClient, asyncio.Lock] = weakref.WeakKeyDictionary()


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


async def mailbox_roles(client: JmapClient, mailbox_ids: frozenset[str]) -> frozenset[str]:
    """The roles of the mailboxes `mailbox_ids`, from `client`'s mailbox list read at most
    `ROLES_TTL_S` ago; a mailbox the list does not know (made since) reads it again. The
    entries of a batch that all need it share one Mailbox/get. JMAP errors propagate."""
    if not _stale(_listings.get(client), mailbox_ids):
        return roles_in(_listings[client].roles, mailbox_ids)
    async with _reading.setdefault(client, asyncio.Lock()):
        held = _listings.get(client)
        if _stale(held, mailbox_ids):
            held = _Listing(time.monotonic(), roles_by_id(await client.mailboxes()))
            _listings[client] = held
    assert held is not None
    return roles_in(held.roles, mailbox_ids)


async def facts_for(cfg: BusinessConfig, client: JmapClient, meta: EmailMeta) -> MailFacts:
    """What the rules look at in `meta`; the mailbox roles only when a rule needs them."""
    roles = await mailbox_roles(client, meta.mailbox_ids) if needs_roles(cfg) else frozenset()
    return facts_of(meta, roles)


# ----------------------------------------------------------------------------- dry run


def _listing_filter(notify: frozenset[str], excluded: frozenset[str]) -> dict[str, Any]:
    """In a notify mailbox and in none of Drafts / Sent / Junk / Trash (the reconcile's rule)."""
    where = in_any_mailbox(notify)
    if not excluded:
        return where
    return {"operator": "AND", "conditions": [
        where, {"operator": "NOT", "conditions": [{"inMailbox": b} for b in sorted(excluded)]}]}


def _verdict(meta: EmailMeta, route: Route) -> dict[str, Any]:
    return {"email_id": meta.id, "from": meta.sender, "subject": meta.subject,
            "received_at": meta.received_at, "rule": route.rule,
            "action": "mute" if route.muted else "notify", "chat_id": route.chat_id,
            "thread_id": route.thread_id, "silent": route.silent, "quiet": route.quiet}


async def dry_run(cfg: BusinessConfig, client: JmapClient,
                  now: dt.datetime | None = None) -> dict[str, Any]:
    """`{checked, mails}`: what `cfg`'s rules and quiet hours decide, at `now`, for the newest
    `DRY_RUN_MAILS` mails of the notify mailboxes, newest first. Sends and writes nothing;
    JMAP errors propagate."""
    boxes = await client.mailboxes()
    roles = roles_by_id(boxes)
    notify, excluded = mailbox_sets(boxes, cfg.notify_mailbox_roles)
    if not notify:
        return {"checked": 0, "mails": []}
    page = await client.query_and_get(_listing_filter(notify, excluded), NEWEST_FIRST,
                                      DRY_RUN_MAILS, properties=MAIL_PROPERTIES)
    at = now or clock()
    mails = [_verdict(meta, route_for(cfg, facts_of(meta, roles_in(roles, meta.mailbox_ids)),
                                      at))
             for meta in page.emails]
    return {"checked": len(mails), "mails": mails}
