"""What the owner gets back from the bot, through `reply_to_update` with the real peers:
Redis for consent, Cyrus for mail and search, fakellm for summaries."""

from __future__ import annotations

import logging
import random
import string
import time

import pytest

from messageweave.chat.texts import EN, ZH, local_time
from messageweave.config.model import parse_wire
from messageweave.config.outbound import OutboundConfig
from messageweave.mail.jmap import JmapClient, JmapError
from messageweave.store import keys
from messageweave.summary import llm
from tests.helpers import Chat, closed_port, sample_wire
from tests.peers.cyrus import CyrusServer
from tests.peers.fakellm import (
    SUMMARY,
    TAIL_MARKER,
    VERBOSE_ANSWER,
    FakeLlm,
    slow_model,
)

HELP = ZH["help"]
HINT = "授权已到期或尚未授权；如需 AI 摘要，请重新选择授权期限。"
EN_HINT = ("No valid consent (expired or never given); for an AI summary, "
           "choose a consent period again.")
ZONE = "Asia/Shanghai"  # sample_wire's time zone, the chat fixture's


def how_to(email_id: str, language: str = "zh") -> str:
    """The line before the hint that says what to send (issue #22)."""
    if language == "en":
        return ("To consent, send /ai on (1 hour), today, 7 days or until I revoke, then "
                f"/summary {email_id} again.")
    return f"授权：发送 /ai on（1小时）、今天、7天 或 直到我撤销，然后再发送 /summary {email_id}。"


BODY = ("Hi Alice,\nplease confirm the March invoice (1200 EUR) by Friday. "
        "The signed copy is attached.\nBob")


def word() -> str:
    return "zq" + "".join(random.choices(string.ascii_lowercase, k=10))


def mail(cyrus: CyrusServer, subject: str = "March invoice", body: str = BODY) -> str:
    return cyrus.append(subject=subject, body=body).email_id


async def test_help_and_unknown_text(chat: Chat) -> None:
    assert await chat.say("/help") == [HELP]
    assert await chat.say("怎么用") == [HELP]
    for silent in ("hello", "", "👍", "שלום", "x" * 10_000):
        assert await chat.say(silent) == []
    assert await chat.say("/start") == [ZH["start_owner"]]  # issue #34: no longer silent


@pytest.mark.parametrize(("phrase", "ttl", "label"), [
    ("临时一次", 3600, "临时1小时"),
    ("一次", 3600, "临时1小时"),
    ("今天", 86400, "今天"),
    ("7天", 604800, "7天"),
    ("直到我撤销", 31536000, "直到撤销（最长365天）"),
    ("长期", 31536000, "直到撤销（最长365天）"),
    ("/ai on", 3600, "1小时"),
    ("开启 AI", 3600, "1小时"),
])
async def test_consent_phrase_stores_the_expiry_with_its_ttl(
    chat: Chat, phrase: str, ttl: int, label: str
) -> None:
    before = int(time.time())
    [reply] = await chat.say(phrase)
    expiry = int(await chat.redis.get(keys.consent_ai(chat.chat_id)))
    assert before + ttl <= expiry <= int(time.time()) + ttl
    assert reply == (f"AI摘要授权已开启：{label}，到期时间 {local_time(expiry, ZONE)}（{ZONE}）；"
                     "仍需使用 /summary <email_id> 请求")
    assert ttl - 2 <= await chat.redis.ttl(keys.consent_ai(chat.chat_id)) <= ttl


@pytest.mark.parametrize("phrase", ["/ai off", "关闭 ai", "撤销授权", "停止摘要"])
async def test_revoke_deletes_consent(chat: Chat, phrase: str) -> None:
    await chat.say("今天")
    assert await chat.say(phrase) == ["AI摘要授权已撤销"]
    assert not await chat.redis.exists(keys.consent_ai(chat.chat_id))


async def test_consent_is_per_chat_and_never_renewed_by_use(
    chat: Chat, cyrus: CyrusServer, fakellm_server: FakeLlm
) -> None:
    """Consent is never renewed by use (§1.2). Issue #11.4: this test once compared whole-second
    TTLs taken a few milliseconds apart, so an `EXPIRE` on read passed it. Now the hour's consent
    is first aged by 50 minutes on both clocks (the key's TTL and the conversation's `now`), so a
    renewal by use would put the TTL visibly back up."""
    key = keys.consent_ai(chat.chat_id)
    await chat.say("/ai on")
    value_before = await chat.redis.get(key)
    await chat.redis.pexpire(key, 600_000)  # 10 of the 60 minutes left in Redis...
    later = chat.with_llm(fakellm_server)
    later.now = lambda: time.time() + 3000  # ...and for the conversation

    assert await later.say(f"/summary {mail(cyrus)}") == [SUMMARY]  # the consent was used

    assert await chat.redis.get(key) == value_before
    assert 0 < await chat.redis.pttl(key) <= 600_000
    assert not await chat.redis.exists(keys.consent_ai(chat.chat_id + 1))


async def test_summary_without_consent_is_metadata_and_the_hint_and_no_llm_request(
    chat: Chat, cyrus: CyrusServer, fakellm_server: FakeLlm
) -> None:
    email_id = mail(cyrus, subject="Quarterly report")
    before = await fakellm_server.total_requests()
    replies = await chat.with_llm(fakellm_server).say(f"/summary {email_id}")
    assert replies == [
        f"Bob Example <bob@example.org> — Quarterly report\n{how_to(email_id)}\n{HINT}"]
    assert await fakellm_server.total_requests() == before


async def test_expired_consent_counts_as_none(
    chat: Chat, cyrus: CyrusServer, fakellm_server: FakeLlm
) -> None:
    await chat.say("临时")
    later = chat.with_llm(fakellm_server)
    later.now = lambda: time.time() + 3601  # the stored expiry is in the past
    before = await fakellm_server.total_requests()
    [reply] = await later.say(f"/summary {mail(cyrus)}")
    assert reply.endswith(HINT)
    assert await fakellm_server.total_requests() == before


async def test_summary_with_consent_is_the_llm_answer(
    chat: Chat, cyrus: CyrusServer, fakellm_server: FakeLlm
) -> None:
    email_id = mail(cyrus)
    await chat.say("/ai on")
    before = await fakellm_server.requests_by_rule()
    # SPEC C.6: the id keeps its case (Cyrus ids start with an upper-case M).
    assert await chat.with_llm(fakellm_server).say(f"/summary {email_id}") == [SUMMARY]
    after = await fakellm_server.requests_by_rule()
    # The "summary" rule requires our instruction in the messages: it was sent.
    assert after.get("summary", 0) == before.get("summary", 0) + 1


async def test_a_long_llm_answer_is_cut_to_300_characters(
    chat: Chat, cyrus: CyrusServer, fakellm_server: FakeLlm
) -> None:
    await chat.say("今天")
    [reply] = await chat.with_llm(fakellm_server, "verbose").say(f"摘要 {mail(cyrus)}")
    assert reply == VERBOSE_ANSWER[:300]


async def test_the_model_never_sees_more_than_the_input_bound(
    chat: Chat, cyrus: CyrusServer, fakellm_server: FakeLlm
) -> None:
    body = ("Lorem ipsum dolor sit amet. " * 400) + TAIL_MARKER  # ~11 200 characters
    await chat.say("今天")
    assert await chat.with_llm(fakellm_server).say(f"/summary {mail(cyrus, body=body)}") == [
        SUMMARY]


@pytest.mark.parametrize("model", ["rate-limited", "broken"])
async def test_llm_failure_falls_back_to_the_local_excerpt_without_a_retry_storm(
    chat: Chat, cyrus: CyrusServer, fakellm_server: FakeLlm, model: str
) -> None:
    body = "第一行。" + "内容" * 400
    await chat.say("/ai on")
    before = await fakellm_server.total_requests()
    [reply] = await chat.with_llm(fakellm_server, model).say(f"/summary {mail(cyrus, body=body)}")
    assert reply == body[:300]
    # max_retries=1: one attempt and one retry, then the fallback
    assert await fakellm_server.total_requests() == before + 2


async def test_an_llm_that_does_not_answer_in_time_falls_back(
    chat: Chat, cyrus: CyrusServer, fakellm_server: FakeLlm
) -> None:
    await chat.say("/ai on")
    slow = chat.with_llm(fakellm_server, slow_model(5000), llm_timeout_ms=300, max_retries=0)
    started = time.monotonic()
    [reply] = await slow.say(f"/summary {mail(cyrus)}")
    assert reply == BODY[:300]
    assert time.monotonic() - started < 3


def test_the_summary_budget_ends_inside_the_delivery_lease() -> None:
    """Issue #11.3: with the defaults one summary could take about 2 minutes (4 attempts of
    30 s plus the SDK's backoff), longer than the worker's 60 s in-flight lease."""
    assert llm.budget_s(OutboundConfig()) == llm.SUMMARY_DEADLINE_S == 45.0
    assert llm.SUMMARY_DEADLINE_S < keys.INFLIGHT_TTL_S
    longest = OutboundConfig(llm_timeout_ms=300_000, max_retries=5)
    assert llm.budget_s(longest) == 45.0
    assert llm.budget_s(OutboundConfig(llm_timeout_ms=400, max_retries=3)) == 1.6
    assert llm.attempts(OutboundConfig(max_retries=255)) == 6  # the cap, whatever is stored


async def test_a_slow_llm_is_retried_but_the_whole_summary_ends_within_its_budget(
    chat: Chat, cyrus: CyrusServer, fakellm_server: FakeLlm
) -> None:
    """Issue #11.3: every attempt, the SDK's own retries and their backoff share one budget
    (here 4 attempts × 0.4 s = 1.6 s; unbounded, they took about 5 s), then the excerpt is sent.
    fakellm answers each attempt 5 s late."""
    await chat.say("/ai on")
    slow = chat.with_llm(fakellm_server, slow_model(5000), llm_timeout_ms=400, max_retries=3)
    budget = llm.budget_s(slow.outbound)
    before = (await fakellm_server.requests_by_rule()).get("slow", 0)

    started = time.monotonic()
    [reply] = await slow.say(f"/summary {mail(cyrus)}")
    elapsed = time.monotonic() - started

    assert reply == BODY[:300]
    assert budget <= elapsed < budget + 1.5
    made = (await fakellm_server.requests_by_rule()).get("slow", 0) - before
    assert 2 <= made < llm.attempts(slow.outbound)  # the SDK retried; the budget ended it


async def test_a_slow_llm_answer_inside_the_budget_is_used(
    chat: Chat, cyrus: CyrusServer, fakellm_server: FakeLlm
) -> None:
    await chat.say("/ai on")
    slow = chat.with_llm(fakellm_server, slow_model(300), llm_timeout_ms=3000, max_retries=0)
    assert await slow.say(f"/summary {mail(cyrus)}") == [SUMMARY]


async def test_consent_without_an_llm_sends_the_local_excerpt(
    chat: Chat, cyrus: CyrusServer
) -> None:
    body = "x" * 500
    await chat.say("/ai on")
    assert not chat.config.llm_enabled
    assert await chat.say(f"/summary {mail(cyrus, body=body)}") == ["x" * 300]


async def test_summary_asks_for_an_id_and_ignores_unknown_ids(
    chat: Chat, fakellm_server: FakeLlm
) -> None:
    assert await chat.say("/summary") == ["请提供邮件 ID，例如：摘要 e-123"]
    assert await chat.say("查邮件") == ["请提供邮件 ID，例如：摘要 e-123"]
    await chat.say("/ai on")
    before = await fakellm_server.total_requests()
    assert await chat.with_llm(fakellm_server).say("/summary Mdoesnotexist0000") == []
    assert await fakellm_server.total_requests() == before


async def test_a_lowercased_id_is_not_the_same_mail(chat: Chat, cyrus: CyrusServer) -> None:
    email_id = mail(cyrus, subject="Case matters")
    assert email_id != email_id.lower()
    assert await chat.say(f"/summary {email_id.lower()}") == []
    assert (await chat.say(f"/summary {email_id}"))[0].startswith("Bob Example")


async def test_search_lists_real_hits_with_clean_snippets(
    chat: Chat, cyrus: CyrusServer
) -> None:
    token = word()
    in_subject = cyrus.append(subject=f"Invoice {token} & receipt", body="see attachment")
    in_body = cyrus.append(subject="Lunch", body=f"Shall we try the {token} place <b>today</b>?")
    cyrus.index("alice")
    [reply] = await chat.say(f"/search {token}")
    lines = reply.split("\n")
    assert lines[0] == f"搜索「{token}」：共 2 封匹配邮件"
    assert f"- Invoice {token} & receipt（{in_subject.email_id}）" in lines
    assert f"- Lunch（{in_body.email_id}）" in lines
    preview = lines[lines.index(f"- Lunch（{in_body.email_id}）") + 1]
    assert preview.startswith("  ") and f"the {token} place <b>today</b>" in preview
    assert "<mark>" not in reply and "&lt;" not in reply and "&amp;" not in reply


async def test_search_without_hits_and_without_a_query(chat: Chat, cyrus: CyrusServer) -> None:
    token = word()
    assert await chat.say(f"搜索 {token}") == [f"没有找到匹配「{token}」的邮件。"]
    for empty in ("/search", "/search   ", "搜索", "查找 "):
        assert await chat.say(empty) == ["请提供搜索关键词，例如：/search 发票"]
    assert await chat.say("/search " + "发票" * 200) == [
        "搜索关键词太长了（最多 256 个字符），请缩短后再试。"]


async def test_an_unreachable_mailbox_raises_so_the_update_is_retried(chat: Chat) -> None:
    wire = sample_wire(jmap_session_url=f"https://127.0.0.1:{closed_port()}/",
                       telegram_chat_id=chat.chat_id, chat_allowlist=[chat.chat_id])
    async with JmapClient(wire["jmap_session_url"], "alice", "pw", timeout=2) as down:
        broken = Chat(chat.chat_id, chat.redis, down, parse_wire(wire), chat.outbound)
        with pytest.raises(JmapError):
            await broken.say("/search invoice")
        with pytest.raises(JmapError):
            await broken.say("/summary M123")
        assert await broken.say("/help") == [HELP]  # needs no mailbox


async def test_mail_bodies_and_summaries_never_reach_the_logs(
    chat: Chat, cyrus: CyrusServer, fakellm_server: FakeLlm, caplog: pytest.LogCaptureFixture
) -> None:
    secret_body = f"The vault code is {word()}; keep it private."
    email_id = mail(cyrus, subject="Private", body=secret_body)
    caplog.set_level(logging.DEBUG)
    await chat.say("/ai on")
    assert await chat.with_llm(fakellm_server).say(f"/summary {email_id}") == [SUMMARY]
    assert await chat.with_llm(fakellm_server, "broken").say(f"/summary {email_id}") == [
        secret_body]
    logged = caplog.text + "".join(str(r.args) for r in caplog.records)
    assert caplog.records  # DEBUG logging was on (httpx, openai, ours)
    assert "vault code" not in logged
    assert SUMMARY not in logged
    assert "llm-key-SECRET" not in logged


# --- bot_language "en" (issue #16): the same paths, English replies ------------------------------


async def test_english_help_and_unknown_text(chat: Chat) -> None:
    """Catches a reply left in Chinese for an English bot, and English that wakes the bot on
    ordinary text."""
    english = chat.speaking("en")
    assert await english.say("/help") == [EN["help"]]
    assert await english.say("怎么用") == [EN["help"]]  # Chinese phrases still understood
    assert EN["help"].startswith("How to use:\n")
    for silent in ("hello", "once upon a time", "what came in today?"):
        assert await english.say(silent) == []
    assert await english.say("/start") == [EN["start_owner"]]


@pytest.mark.parametrize(("phrase", "ttl", "label"), [
    ("once", 3600, "1 hour (one-off)"),
    ("1 hour", 3600, "1 hour"),
    ("/ai on", 3600, "1 hour"),
    ("Today", 86400, "today"),
    ("7 days", 604800, "7 days"),
    ("until I revoke", 31536000, "until revoked (at most 365 days)"),
    ("long term", 31536000, "until revoked (at most 365 days)"),
    ("今天", 86400, "today"),  # a Chinese phrase, answered in English
])
async def test_english_consent_phrase_stores_the_expiry_and_confirms_in_english(
    chat: Chat, phrase: str, ttl: int, label: str
) -> None:
    """Catches an English phrase that grants nothing or the wrong duration, and a confirmation
    with the Chinese label."""
    before = int(time.time())
    [reply] = await chat.speaking("en").say(phrase)
    expiry = int(await chat.redis.get(keys.consent_ai(chat.chat_id)))
    assert before + ttl <= expiry <= int(time.time()) + ttl
    assert reply == (f"AI summaries are on: {label}, until {local_time(expiry, ZONE)} ({ZONE}). "
                     "Ask for each one with /summary <email_id>")


async def test_an_english_phrase_to_a_chinese_bot_is_answered_in_chinese(chat: Chat) -> None:
    """Catches the English phrases working only when bot_language is en (the decision: always)."""
    [reply] = await chat.say("7 days")
    expiry = int(await chat.redis.get(keys.consent_ai(chat.chat_id)))
    assert reply == (f"AI摘要授权已开启：7天，到期时间 {local_time(expiry, ZONE)}（{ZONE}）；"
                     "仍需使用 /summary <email_id> 请求")
    assert await chat.say("stop summaries") == ["AI摘要授权已撤销"]


@pytest.mark.parametrize("phrase", ["/ai off", "revoke", "Stop  summaries", "停止摘要"])
async def test_english_revoke_deletes_consent(chat: Chat, phrase: str) -> None:
    """Catches an English revoke phrase that leaves the consent in Redis."""
    english = chat.speaking("en")
    await english.say("today")
    assert await english.say(phrase) == ["AI summary consent revoked"]
    assert not await chat.redis.exists(keys.consent_ai(chat.chat_id))


async def test_english_summary_without_consent_is_metadata_and_the_hint(
    chat: Chat, cyrus: CyrusServer, fakellm_server: FakeLlm
) -> None:
    """Catches the Chinese re-consent hint in an English bot, or content sent without consent."""
    email_id = mail(cyrus, subject="Quarterly report")
    english = chat.speaking("en").with_llm(fakellm_server)
    before = await fakellm_server.total_requests()
    assert await english.say(f"/summary {email_id}") == [
        f"Bob Example <bob@example.org> — Quarterly report\n{how_to(email_id, 'en')}\n{EN_HINT}"]
    assert await fakellm_server.total_requests() == before
    assert await english.say("/summary") == ["Please give an email id, e.g. /summary e-123"]
    await english.say("once")
    assert await english.say(f"/summary {email_id}") == [SUMMARY]


async def test_english_search_replies_against_real_mail(chat: Chat, cyrus: CyrusServer) -> None:
    """Catches a search reply in Chinese (header, brackets, hints) for an English bot."""
    english = chat.speaking("en")
    token = word()
    hit = cyrus.append(subject=f"Invoice {token}", body=f"the {token} invoice is attached")
    cyrus.index("alice")
    [reply] = await english.say(f"/search {token}")
    lines = reply.split("\n")
    assert lines[0] == f'Search "{token}": 1 matching mail(s)'
    assert lines[1] == f"- Invoice {token} ({hit.email_id})"
    assert lines[2].startswith(f"  the {token} invoice")
    missing = word()
    assert await english.say(f"搜索 {missing}") == [f'No mail matches "{missing}".']
    assert await english.say("/search") == ["Please give search words, e.g. /search invoice"]
    assert await english.say("/search " + "x" * 300) == [
        "The search is too long (at most 256 characters); please shorten it."]
