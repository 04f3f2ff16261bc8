"""`pipeline.digest` without peers: how a digest entry's mails are grouped into messages, and
the digest's text in both languages."""

from __future__ import annotations

import itertools
import re
import time
from typing import Any

from messageweave.config.model import BusinessConfig, parse_wire, validate
from messageweave.mail.jmap import EmailMeta
from messageweave.pipeline.digest import (
    LINE_MAX_CHARS,
    MAX_LINES,
    Part,
    Plan,
    digest_text,
    make_plan,
    render,
)
from messageweave.pipeline.routing import Route
from messageweave.untrusted import clean
from tests.helpers import sample_wire

HOME, TEAM = 4242, -100777


def config(**overrides: Any) -> BusinessConfig:
    cfg = parse_wire(sample_wire(chat_allowlist=[HOME, TEAM], **overrides))
    validate(cfg)
    return cfg


def meta(n: int, sender: str | None = "Ada Lovelace <ada@example.org>",
         subject: str | None = None) -> EmailMeta:
    return EmailMeta(f"M{n}", sender, f"mail {n}" if subject is None else subject,
                     1_700_000_000 + n, frozenset({"inbox"}), frozenset(), "")


def test_a_group_above_the_threshold_is_one_digest_and_a_small_one_a_message_per_mail() -> None:
    """Catches a digest that ignores the chats (every mail in one digest), counts the whole
    entry instead of the group, or sends a digest for a group at the threshold exactly."""
    cfg = config(digest_threshold=3)
    metas = {m.id: m for m in (meta(n) for n in range(7))}
    team = Route(TEAM, 9, True, "team")
    routes = {"M0": team, "M1": Route(HOME), "M2": team, "M3": team, "M4": team,
              "M5": Route(HOME), "M6": Route(HOME)}
    plan = make_plan(cfg, list(metas), metas, routes)
    assert plan.parts == (
        Part(TEAM, 9, True, True, ("M0", "M2", "M3", "M4")),
        Part(HOME, None, False, False, ("M1",)),
        Part(HOME, None, False, False, ("M5",)),
        Part(HOME, None, False, False, ("M6",)),
    )
    assert plan.place_of("M3") == 0 and plan.place_of("M6") == 3


def test_muted_and_vanished_mails_are_left_out_and_remembered() -> None:
    """Catches a muted mail counted in a digest (or sent), and a vanished mail that breaks
    the entry instead of being left out."""
    cfg = config(digest_threshold=2)
    metas = {m.id: m for m in (meta(n) for n in range(4))}
    routes = {i: Route(HOME) for i in metas} | {"M1": Route(HOME, rule="news", muted=True)}
    plan = make_plan(cfg, ["M0", "M1", "M2", "M3", "M9"], metas, routes)
    assert plan.parts == (Part(HOME, None, False, True, ("M0", "M2", "M3")),)
    assert plan.muted == {"M1": "news"} and plan.gone == ("M9",)
    assert plan.place_of("M1") is None
    assert Plan.from_json(plan.to_json()) == plan


def test_a_digest_is_silent_only_when_all_its_mails_are() -> None:
    """Catches a digest that buzzes inside quiet hours, or one silenced by a single mail."""
    cfg = config(digest_threshold=2)
    metas = {m.id: m for m in (meta(n) for n in range(3))}
    quiet = {i: Route(HOME, silent=True, quiet=True) for i in metas}
    assert make_plan(cfg, list(metas), metas, quiet).parts[0].silent is True
    mixed = quiet | {"M1": Route(HOME)}
    assert make_plan(cfg, list(metas), metas, mixed).parts[0].silent is False


def test_with_the_digest_turned_off_every_mail_gets_its_own_message() -> None:
    """Catches a digest entry still summarized after the owner turned the digest off."""
    cfg = config()
    metas = {m.id: m for m in (meta(n) for n in range(5))}
    plan = make_plan(cfg, list(metas), metas, {i: Route(HOME) for i in metas})
    assert [p.digest for p in plan.parts] == [False] * 5


def test_the_digest_lists_the_newest_twenty_then_the_rest_as_a_count() -> None:
    """Catches a digest that lists every mail of a week offline, the oldest first, or loses
    the count of the ones it does not list."""
    metas = [meta(n) for n in range(25)]
    text = digest_text("en", 25, metas)
    lines = text.split("\n")
    assert lines[0] == "New mail digest: 25 mails"
    assert lines[1:1 + MAX_LINES] == [f"Ada Lovelace — mail {n}" for n in range(24, 4, -1)]
    assert lines[-1] == "… and 5 more" and len(lines) == MAX_LINES + 2
    zh = digest_text("zh", 25, metas).split("\n")
    assert zh[0] == "新邮件汇总：共 25 封" and zh[-1] == "……还有 5 封"


def test_a_digest_line_is_one_short_line_whatever_the_mail_says() -> None:
    """Catches a subject with line breaks that adds lines, an endless subject that pushes the
    digest past one Telegram message, and a mail without sender or subject."""
    metas = [meta(1, sender="bare@example.org", subject="two\nlines"),
             meta(2, sender=None, subject=""), meta(3, subject="x" * 500)]
    lines = digest_text("en", 3, metas).split("\n")
    assert len(lines) == 4  # the header and one line per mail, newest first
    assert lines[1] == ("Ada Lovelace — " + "x" * 500)[:LINE_MAX_CHARS - 1] + "…"
    assert lines[2] == "(unknown sender) — (no subject)"
    assert lines[3] == "bare@example.org — two lines"
    assert all(len(line) <= LINE_MAX_CHARS for line in lines)


def test_a_retry_keeps_the_plan_and_says_so_for_a_mail_gone_meanwhile() -> None:
    """Catches a retry whose messages shift when a mail was deleted after the first attempt
    (the ledger resumes by position: a shift would skip one message or send one twice)."""
    cfg = config(digest_threshold=2, bot_language="en")
    plan = Plan((Part(HOME, None, False, False, ("M0",)),
                 Part(HOME, 5, True, True, ("M1", "M2", "M3")),
                 Part(HOME, None, False, False, ("M4",))))
    metas = {m.id: m for m in (meta(n) for n in (1, 3, 4))}  # M0 and M2 are gone
    messages = render(cfg, plan, metas)
    assert len(messages) == 3
    assert messages[0].text == "A new mail is no longer in the mailbox: M0"
    assert messages[0].options.keyboard is None
    assert messages[1].text.split("\n")[0] == "New mail digest: 3 mails"
    assert messages[1].text.split("\n")[1:] == ["Ada Lovelace — mail 3", "Ada Lovelace — mail 1",
                                                "… and 1 more"]
    assert (messages[1].options.thread_id, messages[1].options.silent) == (5, True)
    assert messages[1].options.keyboard is None
    assert messages[2].text.startswith("From: Ada Lovelace <ada@example.org>\nSubject: mail 4")
    assert messages[2].options.keyboard is not None  # a notification keeps its buttons


def test_a_sender_name_of_endless_spaces_is_read_in_linear_time() -> None:
    """Catches a quadratic pass over a name the mail chose: `^(.*?)\\s*<[^<>]*>\\s*$` retried a
    run of spaces from each of its characters (100,000 spaces: about 8 s holding the GIL, so
    the whole process stood still). The From name has no cap: 512 KiB of it must stay fast."""
    spaces = " " * (512 * 1024)
    metas = [meta(1, sender=f"Ada{spaces}Lovelace <ada@example.org>"),
             meta(2, sender=f'"{spaces}x" {spaces}<{spaces}>{spaces}'),
             meta(3, sender=f"Ada{spaces}x")]
    started = time.monotonic()
    lines = digest_text("en", 3, metas).split("\n")
    assert time.monotonic() - started < 1.0  # about 10 ms here
    assert lines[1:] == ["Ada x — mail 3", "x — mail 2", "Ada Lovelace — mail 1"]


def test_the_sender_s_name_is_what_the_old_pattern_found() -> None:
    """Catches the linear rewrite of the digest's sender name naming a sender otherwise than
    the pattern it replaced did, for every mix of up to 5 spaces, line breaks, quotes and angle
    brackets around a name. The sender is cleaned first (`untrusted.clean`: a line break is a
    space), then named."""
    old = re.compile(r"^(.*?)\s*<[^<>]*>\s*$")
    for size in range(6):
        for chars in itertools.product(' \n<>"a', repeat=size):
            sender = "".join(chars)
            if not sender.strip():
                continue
            cleaned = clean(sender)
            named = old.match(cleaned)
            who = cleaned if named is None else named.group(1).strip('" ') or cleaned
            line = digest_text("en", 1, [meta(1, sender=sender)]).split("\n")[1]
            assert line == f"{' '.join(who.split())} — mail 1"
