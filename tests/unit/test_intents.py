"""`parse_intent`: every example of inventory §5.1/§5.2, the documented quirks, SPEC C.6, and the
English consent phrases of issue #16."""

import pytest

from messageweave.chat.intents import (
    LABEL_ONE_HOUR,
    LABEL_ONE_HOUR_TEMPORARY,
    LABEL_SEVEN_DAYS,
    LABEL_TODAY,
    LABEL_UNTIL_REVOKED,
    GrantConsent,
    Help,
    Intent,
    MissingEmailId,
    Read,
    RevokeConsent,
    Search,
    Start,
    Summary,
    Unknown,
    parse_intent,
)

HOUR_TEMP = GrantConsent(3600, LABEL_ONE_HOUR_TEMPORARY)
HOUR = GrantConsent(3600, LABEL_ONE_HOUR)
TODAY = GrantConsent(86400, LABEL_TODAY)
WEEK = GrantConsent(604800, LABEL_SEVEN_DAYS)
UNTIL_REVOKED = GrantConsent(31536000, LABEL_UNTIL_REVOKED)

CASES: list[tuple[str, Intent]] = [
    # 1. help: exact slash/word forms (ASCII case-insensitive, trimmed), or 帮助 / 怎么用 anywhere
    ("/help", Help()),
    ("help", Help()),
    ("  HELP  ", Help()),
    ("/Help", Help()),
    ("帮助", Help()),
    ("这个机器人怎么用？", Help()),
    ("/help me", Unknown()),
    ("helpful", Unknown()),
    ("搜索帮助", Help()),  # help is checked before the search prefix
    # 2. /search: case-sensitive, followed by whitespace or nothing; query trimmed, case kept
    ("/search 发票", Search("发票")),
    ("/search   Invoice March  ", Search("Invoice March")),
    ("/search\tReport", Search("Report")),
    ("/search", Search("")),
    ("/search   ", Search("")),
    ("/searchx foo", Unknown()),
    ("/SEARCH foo", Unknown()),
    # 3. 搜索 / 查找 / 检索: prefix only
    ("搜索发票", Search("发票")),
    ("搜索 发票", Search("发票")),
    ("查找 合同", Search("合同")),
    ("检索Invoice", Search("Invoice")),
    ("搜索", Search("")),
    ("帮我搜一下发票", Unknown()),
    ("请搜索发票", Unknown()),
    # 4. consent phrases, substrings of the lowercased text, in this order
    ("临时一次", HOUR_TEMP),
    ("临时", HOUR_TEMP),
    ("一次", HOUR_TEMP),
    ("今天", TODAY),
    ("7天", WEEK),
    ("直到我撤销", UNTIL_REVOKED),
    ("长期", UNTIL_REVOKED),
    ("给我开通长期的", UNTIL_REVOKED),
    ("今天和7天", TODAY),  # the earlier phrase wins
    # 5. /ai on family → 1 hour, label 1小时
    ("/ai on", HOUR),
    ("/AI ON", HOUR),
    ("/ai yes", HOUR),
    ("开启 ai", HOUR),
    ("请开启 AI", HOUR),
    ("同意摘要", HOUR),
    ("允许 ai 摘要", HOUR),
    ("/ai  on", Unknown()),  # exact form only
    # 6. revoke
    ("/ai off", RevokeConsent()),
    ("/Ai Off", RevokeConsent()),
    ("关闭 ai", RevokeConsent()),
    ("关闭 AI", RevokeConsent()),
    ("撤销授权", RevokeConsent()),
    ("停止摘要", RevokeConsent()),
    # 7. summary / mail query with or without an id (SPEC C.6: the id keeps its case)
    ("/summary e-123", Summary("e-123")),
    ("/summary Mabc_DEF1", Summary("Mabc_DEF1")),
    ("/SUMMARY M1", Summary("M1")),
    ("摘要 e-123", Summary("e-123")),
    ("总结一下 Mf00d", Summary("Mf00d")),
    ("查询邮件 abc123", Summary("abc123")),
    ("查看邮件 x9", Summary("x9")),
    ("查邮件 e_1", Summary("e_1")),
    ("/summary", MissingEmailId()),
    ("/summary e", MissingEmailId()),  # a one-character id is not an id
    ("/summary e.1", MissingEmailId()),  # only ASCII letters, digits, - and _
    ("摘要", MissingEmailId()),
    ("查邮件", MissingEmailId()),
    ("/summary ｅ１２", MissingEmailId()),  # full-width letters are not ASCII
    ("请给我总结", MissingEmailId()),
    # documented quirks
    ("今天的邮件摘要 e1", TODAY),
    ("同意一次搜索摘要", HOUR_TEMP),
    # 8. everything else
    ("hello", Unknown()),
    ("", Unknown()),
    ("   ", Unknown()),
    ("👍🎉", Unknown()),
    ("שלום עולם", Unknown()),
]


# Issue #16: the English phrases, whatever bot_language says; the whole message only, any case,
# any run of whitespace.
ENGLISH: list[tuple[str, Intent]] = [
    ("once", HOUR_TEMP),
    ("Just once", HOUR_TEMP),
    ("temporary", HOUR_TEMP),
    ("1 hour", HOUR),
    ("  One   Hour ", HOUR),
    ("enable AI", HOUR),
    ("allow ai", HOUR),
    ("allow summaries", HOUR),
    ("today", TODAY),
    ("TODAY", TODAY),
    ("7 days", WEEK),
    ("seven\tdays", WEEK),
    ("1 week", WEEK),
    ("one week", WEEK),
    ("until I revoke", UNTIL_REVOKED),
    ("Until revoked", UNTIL_REVOKED),
    ("long term", UNTIL_REVOKED),
    ("long-term", UNTIL_REVOKED),
    ("revoke", RevokeConsent()),
    ("Revoke consent", RevokeConsent()),
    ("stop summaries", RevokeConsent()),
    ("disable AI", RevokeConsent()),
    ("turn off ai", RevokeConsent()),
    # Not a grant: an English phrase inside a sentence or a word (an accidental grant would send
    # mail text to the model).
    ("concept", Unknown()),
    ("once upon a time", Unknown()),
    ("what did i get today?", Unknown()),
    ("today.", Unknown()),
    ("1 hours", Unknown()),
    ("/summary today", Summary("today")),  # a command first: "today" is its email id
    ("please revoke", Unknown()),
    ("irrevocable", Unknown()),
    # the Chinese phrases keep their substring rules next to the English ones
    ("today 今天", TODAY),
    ("revoke 撤销授权", RevokeConsent()),
]


@pytest.mark.parametrize(("text", "expected"), CASES + ENGLISH)
def test_parse_intent(text: str, expected: Intent) -> None:
    assert parse_intent(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("/read Mabc-12_X", Read("Mabc-12_X")),  # the id keeps its case
    ("  /READ  e1 ", Read("e1")),
    ("/read", MissingEmailId()),
    ("/read 今天", MissingEmailId()),  # a command first: not a consent phrase
    ("/readme e1", Unknown()),
])
def test_read_command(text: str, expected: Intent) -> None:
    """Catches `/read` (issue #25) read as another intent, or `/readme` read as `/read`."""
    assert parse_intent(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("/start", Start()),
    ("  /START ", Start()),
    ("/start 0123456789", Start()),  # "Find my chat"'s code, or any deep-link argument
    ("/start@TestNameBot 0123456789", Start()),  # as a group sends it
    ("/start 今天", Start()),  # a deep link's argument is no consent phrase
    ("/start /help", Start()),
    ("/startx", Unknown()),
    ("please /start", Unknown()),
])
def test_start_command(text: str, expected: Intent) -> None:
    """Catches (issue #34) `/start` read as no command, so never answered ("1 update(s) needed
    no reply"), or its deep-link argument read as a phrase (`/start 今天` granting consent)."""
    assert parse_intent(text) == expected


def test_long_text_is_parsed_without_error() -> None:
    assert parse_intent("x" * 10_000) == Unknown()
    assert parse_intent("/search " + "发票" * 5_000) == Search("发票" * 5_000)


def test_only_ascii_letters_are_lowercased_for_matching() -> None:
    # Python's str.lower() would turn İ into "i̇"; the original only lowers A-Z.
    assert parse_intent("/help\u0130") == Unknown()
    assert parse_intent("/summary \u0130d") == MissingEmailId()
