"""The business configuration's delivery features (issue #16): notification rules, quiet hours,
the backlog digest and the bot's language.

Each field is parsed here from its wire form into a typed value, and checked; a wrong value is a
`ConfigInvalid` whose message names the field (`NOTIFY_RULES[2].chat_id ...`), which the API
answers as `422 invalid_configuration`.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from messageweave.jsonio import is_int

BotLanguage = Literal["zh", "en"]
BOT_LANGUAGES: tuple[BotLanguage, ...] = ("zh", "en")
DEFAULT_BOT_LANGUAGE: BotLanguage = "zh"
# How Telegram's updates reach us (issue #22): `auto` polls while no webhook is registered.
TelegramUpdates = Literal["auto", "webhook", "polling"]
TELEGRAM_UPDATES: tuple[TelegramUpdates, ...] = ("auto", "webhook", "polling")
# Which JMAP push is used (issue #22): `auto` prefers EventSource when the session offers it.
PushMode = Literal["auto", "eventsource", "subscription", "off"]
PUSH_MODES: tuple[PushMode, ...] = ("auto", "eventsource", "subscription", "off")
# How long a transient failure (the peer unreachable, 5xx, a timeout) is retried before the
# entry is dead-lettered (issue #22): a home line's outage of minutes or hours loses nothing.
DEFAULT_RETRY_WINDOW_S = 86_400
RETRY_WINDOW_MAX_S = 518_400  # 6 days: below the 7-day dedup and receipt TTLs
RuleAction = Literal["notify", "mute"]
RULE_ACTIONS: tuple[RuleAction, ...] = ("notify", "mute")

MAX_RULES = 50
MAX_RULE_NAME_CHARS = 64
MAX_RULE_FROM_CHARS = 320
MAX_RULE_SUBJECT_CHARS = 200
MAX_RULE_ROLE_CHARS = 64
MAX_OWNERS = 20
USER_ID_MAX = 2**63 - 1
# 0 turns the digest off; otherwise a pass must find more than this many mails for one chat.
DIGEST_THRESHOLD_MAX = 1000

_RULE_KEYS = frozenset({"name", "from", "subject", "mailbox_role", "action", "chat_id",
                        "thread_id", "silent"})
_CLOCK = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])")
_IDENTIFIER = re.compile(r"[A-Za-z0-9_]{1,40}")
_ADDRESS = re.compile(r"<([^<>]*)>\s*$")


class FeatureInvalid(ValueError):
    """A feature field's value is wrong; the message names the field and is user-facing."""


@dataclass(frozen=True)
class MailFacts:
    """What a rule looks at in one mail."""

    sender: str | None  # "Name <addr>" or the bare address
    subject: str | None
    roles: frozenset[str]  # the roles of the mailboxes the mail is in


@dataclass(frozen=True)
class NotifyRule:
    name: str
    sender: str | None = None  # the wire's "from": an address, or "@domain"
    subject: str | None = None
    mailbox_role: str | None = None
    action: RuleAction = "notify"
    chat_id: int | None = None  # None: the configured telegram_chat_id
    thread_id: int | None = None
    silent: bool = False

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"name": self.name}
        for key, value in (("from", self.sender), ("subject", self.subject),
                           ("mailbox_role", self.mailbox_role)):
            if value is not None:
                wire[key] = value
        wire["action"] = self.action
        if self.chat_id is not None:
            wire["chat_id"] = self.chat_id
        if self.thread_id is not None:
            wire["thread_id"] = self.thread_id
        wire["silent"] = self.silent
        return wire

    def matches(self, mail: MailFacts) -> bool:
        """Every match field the rule has must hold; a rule without one matches any mail."""
        if self.sender is not None:
            address = sender_address(mail.sender)
            wanted = self.sender.lower()
            if wanted.startswith("@"):
                if not address.endswith(wanted):
                    return False
            elif address != wanted:
                return False
        if self.subject is not None and self.subject.lower() not in (mail.subject or "").lower():
            return False
        return self.mailbox_role is None or self.mailbox_role.lower() in mail.roles


@dataclass(frozen=True)
class QuietHours:
    start: str  # "HH:MM", in the configured zone
    end: str

    def to_wire(self) -> dict[str, str]:
        return {"start": self.start, "end": self.end}

    def contains(self, local: dt.datetime | dt.time) -> bool:
        """Whether the local wall-clock time is inside the window [start, end); a window whose
        end is before its start crosses midnight."""
        now = local.time() if isinstance(local, dt.datetime) else local
        start, end = _clock(self.start), _clock(self.end)
        if start < end:
            return start <= now < end
        return now >= start or now < end


def sender_address(sender: str | None) -> str:
    """The lower-case address of a "Name <addr>" or bare-address sender ('' when none)."""
    if not sender:
        return ""
    found = _ADDRESS.search(sender)
    return (found.group(1) if found else sender).strip().lower()


def first_match(rules: Iterable[NotifyRule], mail: MailFacts) -> NotifyRule | None:
    """The rule that decides for this mail: the first that matches (None: today's behaviour)."""
    return next((rule for rule in rules if rule.matches(mail)), None)


def _clock(text: str) -> dt.time:
    found = _CLOCK.fullmatch(text)
    if found is None:
        raise ValueError(text)
    return dt.time(int(found.group(1)), int(found.group(2)))


def _text(where: str, value: object, limit: int, *, blank_ok: bool = False) -> str:
    if not isinstance(value, str):
        raise FeatureInvalid(f"{where} must be a string")
    if not blank_ok and not value.strip():
        raise FeatureInvalid(f"{where} must not be blank")
    if len(value) > limit:
        raise FeatureInvalid(f"{where} must be at most {limit} characters")
    return value.strip()


def _rule_sender(where: str, value: object) -> str:
    text = _text(where, value, MAX_RULE_FROM_CHARS)
    local, at, domain = text.rpartition("@")
    if not at or not domain or "." not in domain or any(c.isspace() for c in text) \
            or "@" in local:
        raise FeatureInvalid(f"{where} must be an address (ada@example.org) or a domain "
                             "(@example.org)")
    return text.lower()


def _rule(index: int, obj: object) -> NotifyRule:
    where = f"NOTIFY_RULES[{index}]"
    if not isinstance(obj, dict):
        raise FeatureInvalid(f"{where} must be an object")
    unknown = sorted(set(obj) - _RULE_KEYS)
    if unknown:
        # Echoed (into a header too) only when it is a plain identifier: never a line break.
        shown = unknown[0] if _IDENTIFIER.fullmatch(unknown[0]) else None
        raise FeatureInvalid(f"{where} has an unknown field" + (f": {shown}" if shown else ""))
    if "name" not in obj:
        raise FeatureInvalid(f"{where}.name is required")
    name = _text(f"{where}.name", obj["name"], MAX_RULE_NAME_CHARS)
    sender = subject = role = None
    if obj.get("from") is not None:
        sender = _rule_sender(f"{where}.from", obj["from"])
    if obj.get("subject") is not None:
        subject = _text(f"{where}.subject", obj["subject"], MAX_RULE_SUBJECT_CHARS)
    if obj.get("mailbox_role") is not None:
        role = _text(f"{where}.mailbox_role", obj["mailbox_role"], MAX_RULE_ROLE_CHARS).lower()
    action = obj.get("action", "notify")
    if action not in RULE_ACTIONS:
        raise FeatureInvalid(f"{where}.action must be notify or mute")
    chat_id, thread_id = obj.get("chat_id"), obj.get("thread_id")
    if chat_id is not None and not is_int(chat_id):
        raise FeatureInvalid(f"{where}.chat_id must be an integer")
    if thread_id is not None and (not is_int(thread_id) or not 1 <= thread_id <= 2**31 - 1):
        raise FeatureInvalid(f"{where}.thread_id must be a positive integer (a forum topic)")
    silent = obj.get("silent", False)
    if not isinstance(silent, bool):
        raise FeatureInvalid(f"{where}.silent must be true or false")
    return NotifyRule(name, sender, subject, role, action, chat_id, thread_id, silent)


def parse_rules(value: object) -> tuple[NotifyRule, ...]:
    if not isinstance(value, list | tuple):
        raise FeatureInvalid("NOTIFY_RULES must be a list of rules")
    if len(value) > MAX_RULES:
        raise FeatureInvalid(f"NOTIFY_RULES must list at most {MAX_RULES} rules")
    rules = tuple(item if isinstance(item, NotifyRule) else _rule(i, item)
                  for i, item in enumerate(value))
    seen: set[str] = set()
    for index, rule in enumerate(rules):
        if rule.name.lower() in seen:
            raise FeatureInvalid(f"NOTIFY_RULES[{index}].name repeats an earlier rule's name")
        seen.add(rule.name.lower())
    return rules


def parse_quiet_hours(value: object) -> QuietHours | None:
    if value is None or isinstance(value, QuietHours):
        return value
    if not isinstance(value, dict) or set(value) != {"start", "end"}:
        raise FeatureInvalid('QUIET_HOURS must be null or {"start": "HH:MM", "end": "HH:MM"}')
    for key in ("start", "end"):
        if not isinstance(value[key], str) or _CLOCK.fullmatch(value[key]) is None:
            raise FeatureInvalid(f"QUIET_HOURS.{key} must be a time HH:MM (00:00 to 23:59)")
    if value["start"] == value["end"]:
        raise FeatureInvalid("QUIET_HOURS.start and QUIET_HOURS.end must differ")
    return QuietHours(value["start"], value["end"])


def parse_digest_threshold(value: object) -> int:
    if not is_int(value) or not (value == 0 or 2 <= value <= DIGEST_THRESHOLD_MAX):
        raise FeatureInvalid(f"DIGEST_THRESHOLD must be 0 (off) or between 2 and "
                             f"{DIGEST_THRESHOLD_MAX}")
    return value


def parse_retry_window(value: object) -> int:
    if not is_int(value) or not 0 <= value <= RETRY_WINDOW_MAX_S:
        raise FeatureInvalid(f"RETRY_WINDOW_S must be between 0 and {RETRY_WINDOW_MAX_S}")
    return value


def parse_read_in_chat(value: object) -> bool:
    if not isinstance(value, bool):
        raise FeatureInvalid("READ_IN_CHAT must be true or false")
    return value


def parse_owner_user_ids(value: object) -> tuple[int, ...]:
    """Issue #32: the Telegram users who may read mail and send replies from the chat (a
    user id is positive: Bot API `User.id`)."""
    if (not isinstance(value, list | tuple) or len(value) > MAX_OWNERS
            or not all(is_int(v) and 0 < v <= USER_ID_MAX for v in value)):
        raise FeatureInvalid(f"OWNER_USER_IDS must list at most {MAX_OWNERS} Telegram user ids "
                             "(positive integers)")
    return tuple(dict.fromkeys(value))


def check_rule_chats(rules: Iterable[NotifyRule], allowlist: Iterable[int]) -> None:
    """A rule may only send to a chat of the allowlist."""
    allowed = frozenset(allowlist)
    for index, rule in enumerate(rules):
        if rule.chat_id is not None and rule.chat_id not in allowed:
            raise FeatureInvalid(f"NOTIFY_RULES[{index}].chat_id must be in CHAT_ALLOWLIST")
