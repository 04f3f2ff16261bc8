"""Where one mail's notification goes (issue #16): the first matching rule of `notify_rules`
decides the chat, the forum topic, silence or mute; quiet hours make it silent.

Pure functions: the caller supplies the mail's facts (`MailFacts`: sender, subject, the roles
of its mailboxes) and the local time.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from dataclasses import dataclass

from messageweave.config.features import MailFacts, first_match
from messageweave.config.model import BusinessConfig
from messageweave.mail.jmap import EmailMeta


@dataclass(frozen=True)
class Route:
    chat_id: int
    thread_id: int | None = None
    silent: bool = False
    rule: str | None = None  # the name of the rule that decided; None: no rule matched
    muted: bool = False  # a `mute` rule matched: nothing is sent

    @property
    def destination(self) -> tuple[int, int | None]:
        return self.chat_id, self.thread_id


def needs_roles(cfg: BusinessConfig) -> bool:
    """Whether some rule looks at mailbox roles (else the mailbox list need not be fetched)."""
    return any(rule.mailbox_role is not None for rule in cfg.notify_rules)


def facts_of(meta: EmailMeta, roles: frozenset[str] = frozenset()) -> MailFacts:
    return MailFacts(meta.sender, meta.subject, roles)


def local_now(cfg: BusinessConfig, now: dt.datetime | None = None) -> dt.datetime:
    """`now` (default: the current time) in the configured zone."""
    zone = zoneinfo.ZoneInfo(cfg.timezone)
    return (now or dt.datetime.now(dt.UTC)).astimezone(zone)


def route_for(cfg: BusinessConfig, mail: MailFacts, now: dt.datetime | None = None) -> Route:
    """The decision for one mail at `now` (an aware datetime; default the current time)."""
    rule = first_match(cfg.notify_rules, mail)
    quiet = cfg.quiet_hours is not None and cfg.quiet_hours.contains(local_now(cfg, now))
    if rule is None:
        return Route(cfg.telegram_chat_id, silent=quiet)
    if rule.action == "mute":
        return Route(cfg.telegram_chat_id, rule=rule.name, muted=True)
    chat = rule.chat_id if rule.chat_id is not None else cfg.telegram_chat_id
    return Route(chat, rule.thread_id, rule.silent or quiet, rule.name)
