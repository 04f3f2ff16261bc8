"""The bot's texts in both languages (issue #16): one table per language, the same keys and
placeholders in each, the Chinese contract kept, and English help that tells the truth."""

import re
import string

import pytest

from messageweave.chat import intents, texts
from messageweave.chat.webhook_setup import COMMANDS, commands
from messageweave.config.features import BOT_LANGUAGES
from messageweave.mail.jmap import EmailMeta, SearchResult, SearchSnippet
from messageweave.pipeline.search import search_reply


def placeholders(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


def test_every_language_has_the_same_keys_and_placeholders() -> None:
    """Catches a string added to one language only (a KeyError when the other one is set) or a
    translation that drops or renames a `{placeholder}` (a KeyError, or a reply without it)."""
    assert set(texts.TEXTS) == set(BOT_LANGUAGES)
    for language in BOT_LANGUAGES:
        table = texts.table(language)
        assert table.keys() == texts.ZH.keys(), language
        for key, template in table.items():
            assert template.strip(), (language, key)
            assert placeholders(template) == placeholders(texts.ZH[key]), (language, key)


def test_the_english_table_is_english() -> None:
    """Catches a Chinese string copied into the English table instead of translated."""
    for key, template in texts.EN.items():
        assert not re.search(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]", template), key


def test_the_chinese_texts_are_the_contract() -> None:
    """Catches an edit of the contract's Chinese strings (inventory §5.2) while adding English.
    One line is a listed deviation (reference §7): the help's consent heading said English
    aliases do not work, which stopped being true when they did (issue #16); and three lines
    are added (issue #25, reference §7.13): `/read`, `/reply` and the buttons."""
    zh = texts.ZH
    assert zh["help"] == (  # inventory §5.2, byte for byte but for the consent heading
        "使用说明：\n邮件到达后会先发送发件人、主题和时间等元数据通知。\n\n"
        "授权示例（中文短语可写在句中；英文短语须单独发送：1 hour、today、7 days、"
        "until I revoke、revoke）：\n"
        "1小时：/ai on、临时一次、临时、一次\n今天：今天\n7天：7天\n"
        "直到我撤销（最长365天）：直到我撤销、长期\n"
        "撤销授权：/ai off、关闭 ai、撤销授权、停止摘要\n"
        "/summary <email_id>：请求指定邮件摘要；未授权或授权到期时只返回元数据并提示重新授权。\n"
        "/search <关键词>：搜索邮件主题与正文，返回带高亮片段的匹配列表（最多 10 条）。\n"
        "/read <email_id>：在聊天中显示邮件全文（发件人、收件人、抄送、日期、主题，"
        "然后是正文，最多 3 条消息）和附件列表，每个附件一个按钮；"
        "正文会经过 Telegram 的服务器，本服务不保存。\n"
        "/reply <email_id> <内容>：回复这封邮件（也可以在 Telegram 中直接回复它的通知）；"
        "先生成草稿，显示收件人、主题和开头几行，按“发送”才发出，按“取消”删除草稿；"
        "24 小时内未发送的草稿会被删除。\n"
        "/help（或 help）：显示本说明。\n"
        "通知下方的按钮：摘要、标为已读、归档、阅读全文（同 /read）；"
        "阅读全文回复下的 📎 按钮发送该附件；回复草稿下的按钮：发送、取消。\n\n"
        "隐私：AI 默认关闭，只有你明确开启后才会发送正文；授权有期限且不会自动续期；"
        "正文和 AI 结果不会持久化，也不会写入日志。\n"
        "如果未配置 AI 或 AI 调用失败，将回退为本地截取摘要。")
    # Deviations (reference §7.12, issue #22): the expiry in the configured zone, not Unix
    # seconds; a line of what to send before the contract's hint, which stays the last line.
    assert texts.consent_granted("zh", intents.LABEL_TODAY, 42, "Asia/Shanghai") == (
        "AI摘要授权已开启：今天，到期时间 1970-01-01 08:00（Asia/Shanghai）；"
        "仍需使用 /summary <email_id> 请求")
    assert texts.summary_without_consent("zh", None, "S", "e-1") == (
        " — S\n授权：发送 /ai on（1小时）、今天、7天 或 直到我撤销，然后再发送 /summary e-1。\n"
        "授权已到期或尚未授权；如需 AI 摘要，请重新选择授权期限。")
    assert zh["consent_revoked"] == "AI摘要授权已撤销"
    assert zh["missing_email_id"] == "请提供邮件 ID，例如：摘要 e-123"


@pytest.mark.parametrize(("label_key", "label"), [
    (intents.LABEL_ONE_HOUR_TEMPORARY, "1 hour (one-off)"),
    (intents.LABEL_ONE_HOUR, "1 hour"),
    (intents.LABEL_TODAY, "today"),
    (intents.LABEL_SEVEN_DAYS, "7 days"),
    (intents.LABEL_UNTIL_REVOKED, "until revoked (at most 365 days)"),
])
def test_an_english_grant_names_its_duration_in_english(label_key: str, label: str) -> None:
    """Catches the Chinese label (`今天`) leaking into an English confirmation."""
    assert texts.consent_granted("en", label_key, 1700000000, "Europe/Berlin") == (
        f"AI summaries are on: {label}, until 2023-11-14 23:13 (Europe/Berlin). "
        "Ask for each one with /summary <email_id>")


def test_the_consent_expiry_is_in_the_configured_zone_not_unix_seconds() -> None:
    """Catches `/ai on` answering "until Unix 1700000000" (issue #22): a time nobody can
    read; the expiry is written as the notifications write times, in the configured zone."""
    for language in ("zh", "en"):
        text = texts.consent_granted(language, intents.LABEL_ONE_HOUR, 1700000000, "Asia/Tokyo")
        assert "Unix" not in text and "1700000000" not in text
        assert "2023-11-15 07:13" in text and "Asia/Tokyo" in text


def test_the_hint_without_consent_says_what_to_send_in_both_languages() -> None:
    """Catches the hint under a summary without consent saying "choose a consent period again"
    without saying how (issue #22): every phrase it names grants consent, and it names the
    mail's own /summary command to send again."""
    for language, sep in (("zh", "、"), ("en", ", ")):
        line = texts.summary_without_consent(language, "Bob", "S", "e-7").split("\n")[1]
        assert "/summary e-7" in line
        named = re.split(r"\s*(?:、|,| or | 或 )\s*", re.sub(
            r"^.*?send\s*|^.*?发送\s*|[,，]\s*then.*$|，然后.*$", "", line))
        phrases = [re.sub(r"[（(].*?[)）]", "", p).strip() for p in named if p.strip()]
        assert len(phrases) == 4, (language, phrases, sep)
        for phrase in phrases:
            assert isinstance(intents.parse_intent(phrase), intents.GrantConsent), phrase


TTLS = (3600, 86400, 604800, 31536000)  # 1 hour, today, 7 days, until revoked


def assert_help_lines(help_text: str, headings: tuple[str, ...], colon: str, comma: str) -> None:
    """The help's lines `heading<colon>phrase<comma>phrase…`: each phrase under the four grant
    headings grants its duration (`TTLS`, in order), each under the last heading revokes."""
    *grants, revoke = headings
    listed = dict(line.split(colon, 1) for line in help_text.split("\n")
                  if line.split(colon, 1)[0] in headings)
    assert set(listed) == set(headings)
    for heading, ttl in zip(grants, TTLS, strict=True):
        for phrase in listed[heading].split(comma):
            intent = intents.parse_intent(phrase)
            assert isinstance(intent, intents.GrantConsent) and intent.ttl_s == ttl, phrase
    for phrase in listed[revoke].split(comma):
        assert intents.parse_intent(phrase) == intents.RevokeConsent(), phrase


def test_every_phrase_the_english_help_lists_does_what_it_says() -> None:
    """Catches help text that promises a phrase the parser does not know, or files it under the
    wrong duration."""
    assert_help_lines(texts.EN["help"], ("1 hour", "Today", "7 days",
                                           "Until I revoke (at most 365 days)", "Revoke"),
                      ": ", ", ")


def test_every_phrase_the_chinese_help_lists_does_what_it_says() -> None:
    """Catches the Chinese help promising what the parser does not do: it said "不支持英文别名"
    (English aliases not supported) while `1 hour` or `revoke` sent alone worked."""
    help_text = texts.ZH["help"]
    assert_help_lines(help_text, ("1小时", "今天", "7天", "直到我撤销（最长365天）", "撤销授权"),
                      "：", "、")
    heading = next(line for line in help_text.split("\n") if line.startswith("授权示例"))
    english = heading.split("英文短语须单独发送：", 1)[1].removesuffix("）：").split("、")
    assert english == ["1 hour", "today", "7 days", "until I revoke", "revoke"]
    for phrase, ttl in zip(english, TTLS, strict=False):
        intent = intents.parse_intent(phrase)
        assert isinstance(intent, intents.GrantConsent) and intent.ttl_s == ttl, phrase
    assert intents.parse_intent(english[-1]) == intents.RevokeConsent()


def test_the_command_menu_follows_the_language() -> None:
    """Catches a menu left in Chinese for an English bot (or the commands themselves changing)."""
    assert [name for name, _ in commands("zh")] == list(COMMANDS) == [
        "help", "search", "summary", "read", "reply", "ai"]
    assert commands("zh")[0] == ("help", "使用说明")
    assert dict(commands("en")) == {
        "help": "How to use",
        "search": "Search mail: /search <words>",
        "summary": "Summarize a mail: /summary <email_id>",
        "read": "Read a mail: /read <email_id>",
        "reply": "Reply to a mail: /reply <email_id> <text>",
        "ai": "AI summary consent: /ai on or /ai off",
    }


def test_english_search_replies() -> None:
    """Catches a search reply that keeps the Chinese header, brackets or placeholder in English."""
    def meta(email_id: str, subject: str | None) -> EmailMeta:
        return EmailMeta(id=email_id, sender=None, subject=subject, received_at=None,
                         mailbox_ids=frozenset(), keywords=frozenset(), preview="")

    assert search_reply("invoice", SearchResult(ids=[], emails=[], snippets=[]), "en") == (
        'No mail matches "invoice".')
    result = SearchResult(
        ids=["M1", "M2"], emails=[meta("M1", "March invoice"), meta("M2", None)],
        snippets=[SearchSnippet("M1", "March <mark>invoice</mark>", "the &amp; receipt"),
                  SearchSnippet("M2", None, None)])
    assert search_reply("invoice", result, "en") == (
        'Search "invoice": 2 matching mail(s)\n'
        "- March invoice (M1)\n"
        "  the & receipt\n"
        "- (no subject) (M2)")
    bare = SearchResult(ids=["a1"], emails=[], snippets=[])
    assert search_reply("x", bare, "en") == (
        'Search "x": 1 matching mail(s)\n'
        "(Highlighted snippets are not available; the matching email ids:)\n- a1")
