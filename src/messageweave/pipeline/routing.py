"""Where one mail's notification goes (issue #16): the first matching rule of `notify_rules`
decides the chat, the forum topic, silence or mute; quiet hours make it silent.

`route_for` is pure: the caller supplies the mail's facts (`MailFacts`: sender, subject, the
roles of its mailboxes) and, optionally, the time. Without one it asks `clock`, the pipeline's
one source of time for routing, which a test replaces to inject the time.

The roles of a mail's mailboxes come from the mail source (`MailReader.mailbox_roles`, which may
keep its mailbox list a minute), and are read only when a rule looks at them (`needs_roles`),
so the push fast path gains no round trip otherwise.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from messageweave.config.features import MailFacts, first_match
from messageweave.config.model import BusinessConfig
from messageweave.mail.records import EmailMeta
from messageweave.mail.source import MailReader

DRY_RUN_MAILS = 20


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


async def facts_for(cfg: BusinessConfig, source: MailReader, meta: EmailMeta) -> MailFacts:
    """What the rules look at in `meta`; the mailbox roles only when a rule needs them."""
    roles = await source.mailbox_roles(meta.mailbox_ids) if needs_roles(cfg) else frozenset()
    return facts_of(meta, roles)


# ----------------------------------------------------------------------------- dry run


def _verdict(meta: EmailMeta, route: Route) -> dict[str, Any]:
    return {"email_id": meta.id, "from": meta.sender, "subject": meta.subject,
            "received_at": meta.received_at, "rule": route.rule,
            "action": "mute" if route.muted else "notify", "chat_id": route.chat_id,
            "thread_id": route.thread_id, "silent": route.silent, "quiet": route.quiet}


async def dry_run(cfg: BusinessConfig, source: MailReader,
                  now: dt.datetime | None = None) -> dict[str, Any]:
    """`{checked, mails}`: what `cfg`'s rules and quiet hours decide, at `now`, for the newest
    `DRY_RUN_MAILS` mails of the notify mailboxes, newest first. Sends and writes nothing;
    mail errors propagate."""
    newest = await source.newest(cfg.notify_mailbox_roles, DRY_RUN_MAILS)
    at = now or clock()
    mails = [_verdict(meta, route_for(cfg, facts_of(meta, roles), at)) for meta, roles in newest]
    return {"checked": len(mails), "mails": mails}
