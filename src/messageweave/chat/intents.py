"""What the owner's message asks for: `parse_intent` (reference §7: bot
conversation, consent phrases).

The order and the triggers are the contract, quirks included: consent phrases are substrings
(`今天的邮件摘要 e1` grants consent for today), 搜索/查找/检索 only count as a prefix, and
`/search` must be followed by whitespace or nothing. The one correction: a `/summary` email id
keeps its case (JMAP ids are case-sensitive).

The English consent phrases (issue #16) are accepted whatever `bot_language` says, but only as
the whole message: as substrings they would hide in ordinary words (`once` in `concept`) and
sentences (`today's mail`), and an accidental grant sends mail text to the model.
"""

from __future__ import annotations

from dataclasses import dataclass

from messageweave.store import keys


@dataclass(frozen=True)
class Help:
    pass


@dataclass(frozen=True)
class Start:
    """`/start`, `/start <code>` ("Find my chat"'s code, `pipeline.ingress.start_code`), and
    either with `@<bot>` as a group sends it (issue #34): the greeting. The code is not kept:
    the page reads it from getUpdates, and the greeting never repeats it."""


@dataclass(frozen=True)
class Search:
    query: str


@dataclass(frozen=True)
class GrantConsent:
    ttl_s: int
    label_key: str  # the duration's name in `chat.texts` (`label_today`, ...)


@dataclass(frozen=True)
class RevokeConsent:
    pass


@dataclass(frozen=True)
class Summary:
    email_id: str


@dataclass(frozen=True)
class Read:
    """`/read <email_id>` (issue #25): the mail's text into the chat."""

    email_id: str


@dataclass(frozen=True)
class ReplyMail:
    """`/reply <email_id> <text>` (issue #25), or a Telegram reply to a notification
    (`pipeline.conversation`): a draft answer to the mail. `text` keeps its lines; it may be
    empty (the owner is told what to write)."""

    email_id: str
    text: str


@dataclass(frozen=True)
class MissingEmailId:
    """A summary or mail query without a usable email id."""


@dataclass(frozen=True)
class Unknown:
    pass


Intent = (Help | Start | Search | GrantConsent | RevokeConsent | Summary | Read | ReplyMail
          | MissingEmailId | Unknown)

LABEL_ONE_HOUR_TEMPORARY = "label_one_hour_temporary"
LABEL_ONE_HOUR = "label_one_hour"
LABEL_TODAY = "label_today"
LABEL_SEVEN_DAYS = "label_seven_days"
LABEL_UNTIL_REVOKED = "label_until_revoked"

# (substrings of the lowercased text, TTL, label), checked in this order (rule 4).
_CONSENT_PHRASES: tuple[tuple[tuple[str, ...], int, str], ...] = (
    (("临时", "一次"), keys.CONSENT_AI_TTL_HOUR_S, LABEL_ONE_HOUR_TEMPORARY),
    (("今天",), keys.CONSENT_AI_TTL_DAY_S, LABEL_TODAY),
    (("7天",), keys.CONSENT_AI_TTL_WEEK_S, LABEL_SEVEN_DAYS),
    (("直到我撤销", "长期"), keys.CONSENT_AI_TTL_MAX_S, LABEL_UNTIL_REVOKED),
)
_AI_ON_EXACT = ("/ai on", "/ai yes")
_AI_ON_PHRASES = ("开启 ai", "同意摘要", "允许 ai")
_AI_OFF_EXACT = ("/ai off",)
_AI_OFF_PHRASES = ("关闭 ai", "撤销授权", "停止摘要")
# English, the whole message (lowercased, runs of whitespace as one space); the same durations
# and labels as the Chinese phrases they translate.
_EN_CONSENT: dict[str, tuple[int, str]] = {
    **dict.fromkeys(("once", "just once", "temporary"),
                    (keys.CONSENT_AI_TTL_HOUR_S, LABEL_ONE_HOUR_TEMPORARY)),
    **dict.fromkeys(("1 hour", "one hour", "enable ai", "allow ai", "allow summaries"),
                    (keys.CONSENT_AI_TTL_HOUR_S, LABEL_ONE_HOUR)),
    "today": (keys.CONSENT_AI_TTL_DAY_S, LABEL_TODAY),
    **dict.fromkeys(("7 days", "seven days", "1 week", "one week"),
                    (keys.CONSENT_AI_TTL_WEEK_S, LABEL_SEVEN_DAYS)),
    **dict.fromkeys(("until i revoke", "until revoked", "long term", "long-term"),
                    (keys.CONSENT_AI_TTL_MAX_S, LABEL_UNTIL_REVOKED)),
}
_EN_REVOKE = frozenset(("revoke", "revoke consent", "stop summaries", "disable ai",
                        "turn off ai"))
_HELP_EXACT = ("/help", "help")
_START_COMMAND = "/start"
_HELP_PHRASES = ("帮助", "怎么用")
_SEARCH_COMMAND = "/search"
_SEARCH_PREFIXES = ("搜索", "查找", "检索")
_SUMMARY_COMMAND = "/summary"
_READ_COMMAND = "/read"
_REPLY_COMMAND = "/reply"
_SUMMARY_PHRASES = ("摘要", "总结")
_QUERY_PHRASES = ("查询邮件", "查看邮件", "查邮件")
_ID_EXTRA_CHARS = frozenset("-_")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def ascii_lower(text: str) -> str:
    """Lowercase A-Z only (like Rust's `to_ascii_lowercase`); other letters keep their case."""
    return text.translate(_ASCII_LOWER)


def _contains_any(text: str, needles: tuple[str, ...]) -> bool:
    return any(needle in text for needle in needles)


def _email_id(text: str) -> str | None:
    """The last whitespace-separated token, if it looks like an email id; its case is kept (a
    JMAP id is case-sensitive; reference §7: bot conversation)."""
    tokens = text.split()
    return _as_email_id(tokens[-1]) if tokens else None


def _as_email_id(token: str) -> str | None:
    if len(token) > 1 and all(
        (c.isascii() and c.isalnum()) or c in _ID_EXTRA_CHARS for c in token
    ):
        return token
    return None


def _is_command(t: str, command: str) -> bool:
    return t.startswith(command) and (len(t) == len(command) or t[len(command)].isspace())


def _reply(rest: str) -> Intent:
    """`/reply`'s rest: the email id first (not last, as `/read`'s: the text follows it),
    then the text with its lines kept."""
    parts = rest.strip().split(None, 1)
    email_id = _as_email_id(parts[0]) if parts else None
    if email_id is None:
        return MissingEmailId()
    return ReplyMail(email_id, parts[1].strip() if len(parts) > 1 else "")


def _is_start(t: str) -> bool:
    """`/start` or `/start@<bot>`, alone or before an argument (Telegram's deep link sends
    `/start <code>`)."""
    first = t.split(None, 1)[0] if t else ""
    return first.split("@", 1)[0] == _START_COMMAND


def parse_intent(text: str) -> Intent:
    raw = text.strip()
    t = ascii_lower(raw)
    if _is_command(t, _REPLY_COMMAND):  # first: its text may hold any phrase below (今天, 帮助)
        return _reply(raw[len(_REPLY_COMMAND):])
    if _is_start(t):  # before the phrases: a deep link's argument may hold any of them
        return Start()
    if t in _HELP_EXACT or _contains_any(t, _HELP_PHRASES):
        return Help()
    if raw.startswith(_SEARCH_COMMAND):
        rest = raw[len(_SEARCH_COMMAND):]
        if not rest or rest[0].isspace():
            return Search(rest.strip())
    for prefix in _SEARCH_PREFIXES:
        if raw.startswith(prefix):
            return Search(raw[len(prefix):].strip())
    if _is_command(t, _READ_COMMAND):
        email_id = _email_id(raw[len(_READ_COMMAND):])
        return Read(email_id) if email_id is not None else MissingEmailId()
    english = " ".join(t.split())
    if english in _EN_CONSENT:
        return GrantConsent(*_EN_CONSENT[english])
    if english in _EN_REVOKE:
        return RevokeConsent()
    for phrases, ttl_s, label in _CONSENT_PHRASES:
        if _contains_any(t, phrases):
            return GrantConsent(ttl_s, label)
    if t in _AI_ON_EXACT or _contains_any(t, _AI_ON_PHRASES):
        return GrantConsent(keys.CONSENT_AI_TTL_HOUR_S, LABEL_ONE_HOUR)
    if t in _AI_OFF_EXACT or _contains_any(t, _AI_OFF_PHRASES):
        return RevokeConsent()
    asks_summary = t.startswith(_SUMMARY_COMMAND) or _contains_any(t, _SUMMARY_PHRASES)
    if asks_summary or _contains_any(t, _QUERY_PHRASES):
        email_id = _email_id(raw)
        return Summary(email_id) if email_id is not None else MissingEmailId()
    return Unknown()
