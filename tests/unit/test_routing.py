"""`pipeline.routing`: which chat, topic and silence a mail gets from the rules and the quiet
hours, at an injected time in the configured zone."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from messageweave.config.features import MailFacts
from messageweave.config.model import BusinessConfig, parse_wire, validate
from messageweave.mail.jmap import Mailbox
from messageweave.mail.jmap.source import roles_by_id, roles_in
from messageweave.pipeline import routing
from messageweave.pipeline.routing import Route, in_quiet_hours, route_for
from tests.helpers import sample_wire

HOME, TEAM = 4242, -100777


def config(**overrides: Any) -> BusinessConfig:
    cfg = parse_wire(sample_wire(chat_allowlist=[HOME, TEAM], **overrides))
    validate(cfg)
    return cfg


def mail(sender: str | None = "Ada <ada@example.org>", subject: str | None = "Hello",
         roles: frozenset[str] = frozenset({"inbox"})) -> MailFacts:
    return MailFacts(sender, subject, roles)


def utc(hour: int, minute: int = 0) -> dt.datetime:
    return dt.datetime(2026, 3, 2, hour, minute, tzinfo=dt.UTC)


RULES = [
    {"name": "newsletters", "subject": "NEWSLETTER", "action": "mute"},
    {"name": "team", "from": "@Example.org", "chat_id": TEAM, "thread_id": 17, "silent": True},
    {"name": "boss", "from": "boss@corp.example", "thread_id": 3},
    {"name": "archive", "mailbox_role": "archive", "chat_id": TEAM},
]


def test_without_rules_every_mail_goes_to_the_configured_chat_aloud() -> None:
    """Catches a router that changes today's behaviour when no rule is configured."""
    assert route_for(config(), mail(), utc(3)) == Route(HOME)


def test_the_first_matching_rule_decides_chat_topic_and_silence() -> None:
    """Catches a later rule overriding an earlier one, a domain rule that is case-sensitive,
    reads the display name or matches a look-alike domain, and a rule without a chat that
    loses the default."""
    cfg = config(notify_rules=RULES)
    assert route_for(cfg, mail("Ada Lovelace <ADA@example.ORG>"), utc(3)) == \
        Route(TEAM, 17, True, "team")
    assert route_for(cfg, mail("ada@example.org", "Our newsletter #4"), utc(3)) == \
        Route(HOME, rule="newsletters", muted=True)
    assert route_for(cfg, mail("Boss <boss@corp.example>"), utc(3)) == \
        Route(HOME, 3, False, "boss")
    assert route_for(cfg, mail("Someone <x@notexample.org>"), utc(3)) == Route(HOME)
    assert route_for(cfg, mail("x@mail.example.org"), utc(3)).rule is None  # the domain only


def test_a_mailbox_role_rule_needs_the_role_and_only_then_the_roles_are_read() -> None:
    """Catches a role rule matching a mail outside that mailbox, and the push path fetching
    the mailbox list when no rule needs it."""
    cfg = config(notify_rules=RULES[3:])
    assert routing.needs_roles(cfg) and not routing.needs_roles(config(notify_rules=RULES[:3]))
    assert route_for(cfg, mail(roles=frozenset({"inbox"})), utc(3)) == Route(HOME)
    assert route_for(cfg, mail(roles=frozenset({"archive"})), utc(3)).chat_id == TEAM


@pytest.mark.parametrize(("start", "end", "hour", "minute", "quiet"), [
    ("22:00", "07:00", 22, 0, True),  # the start is inside
    ("22:00", "07:00", 23, 59, True),
    ("22:00", "07:00", 0, 0, True),  # across midnight
    ("22:00", "07:00", 6, 59, True),
    ("22:00", "07:00", 7, 0, False),  # the end is outside
    ("22:00", "07:00", 12, 0, False),
    ("12:30", "13:30", 12, 30, True),  # a window inside one day
    ("12:30", "13:30", 13, 30, False),
    ("12:30", "13:30", 23, 0, False),
])
def test_quiet_hours_hold_in_the_configured_zone(start: str, end: str, hour: int, minute: int,
                                                 quiet: bool) -> None:
    """Catches quiet hours read in UTC instead of the configured zone, a window crossing
    midnight that never holds, and an off-by-one at its edges."""
    cfg = config(timezone="Asia/Tokyo", quiet_hours={"start": start, "end": end})
    tokyo = dt.datetime(2026, 3, 2, hour, minute, tzinfo=dt.timezone(dt.timedelta(hours=9)))
    now = tokyo.astimezone(dt.UTC)  # the pipeline's clock speaks UTC
    assert in_quiet_hours(cfg, now) is quiet
    route = route_for(cfg, mail(), now)
    assert route.silent is quiet and route.quiet is quiet


def test_quiet_hours_silence_a_routed_mail_and_a_muted_one_stays_muted() -> None:
    """Catches quiet hours that drop a rule's topic, or turn a mute into a silent send."""
    cfg = config(timezone="UTC", quiet_hours={"start": "22:00", "end": "07:00"},
                 notify_rules=RULES)
    assert route_for(cfg, mail("Boss <boss@corp.example>"), utc(23)) == \
        Route(HOME, 3, True, "boss", quiet=True)
    assert route_for(cfg, mail(subject="newsletter"), utc(23)).muted
    assert route_for(cfg, mail("Boss <boss@corp.example>"), utc(12)).silent is False


def test_the_pipeline_routes_at_the_clock_a_test_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Catches a router that reads the wall clock itself, so no test could inject the time."""
    cfg = config(timezone="Europe/Berlin", quiet_hours={"start": "22:00", "end": "07:00"})
    monkeypatch.setattr(routing, "clock", lambda: utc(22, 30))  # 23:30 in Berlin (winter)
    assert route_for(cfg, mail()).silent is True
    monkeypatch.setattr(routing, "clock", lambda: utc(20, 30))  # 21:30 in Berlin
    assert route_for(cfg, mail()).silent is False
    monkeypatch.undo()
    assert abs(routing.clock() - dt.datetime.now(dt.UTC)) < dt.timedelta(seconds=5)


def test_roles_are_read_lower_case_and_unknown_or_roleless_mailboxes_add_none() -> None:
    """Catches a role rule missing a server's `Inbox` spelling or crashing on a mailbox the
    list does not know."""
    roles = roles_by_id([Mailbox("m1", "INBOX", "Inbox"), Mailbox("m2", "Work", None),
                         Mailbox("m3", "Archive", "archive")])
    assert roles_in(roles, {"m1", "m2", "m9"}) == frozenset({"inbox"})
    assert roles_in(roles, {"m3"}) == frozenset({"archive"})
