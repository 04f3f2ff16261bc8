"""End to end, as the owner lives it: the Bot API emulator plays the user and calls our HTTPS
webhook (registered through `/api/telegram/register-webhook`); the in-process worker answers
through the emulator's sendMessage. Mail comes from Cyrus, summaries from fakellm."""

from __future__ import annotations

import random
import string
import time

import httpx

from messageweave.chat.texts import local_time
from messageweave.store import keys
from tests.helpers import eventually, llm_wire
from tests.peers.fakellm import SUMMARY, FakeLlm
from tests.served import ServedApp

HINT = "授权已到期或尚未授权；如需 AI 摘要，请重新选择授权期限。"
ZONE = "Asia/Tokyo"  # peer_wire's time zone


async def bot_api(served: ServedApp, method: str) -> dict:
    async with httpx.AsyncClient(trust_env=False, timeout=5) as client:
        response = await client.post(f"{served.emulator.base_url}/bot{served.token}/{method}")
    body: dict = response.json()
    assert body["ok"], body
    return body


async def test_register_webhook_sets_url_secret_and_command_menu(served: ServedApp) -> None:
    info = (await bot_api(served, "getWebhookInfo"))["result"]
    assert info["url"] == f"{served.url}/webhook/tg"
    assert info["allowed_updates"] == ["message", "callback_query"]
    commands = [(c["command"], c["description"])
                for c in (await bot_api(served, "getMyCommands"))["result"]]
    assert commands == [("help", "使用说明"), ("search", "搜索邮件：/search <关键词>"),
                        ("summary", "邮件摘要：/summary <email_id>"),
                        ("read", "阅读邮件：/read <email_id>"),
                        ("reply", "回复邮件：/reply <email_id> <内容>"),
                        ("ai", "AI 摘要授权：/ai on 或 /ai off")]
    # the secret: the emulator's delivery carries it and our webhook accepts it
    assert await served.say("/help") == 204
    [delivery] = await served.emulator.webhook_deliveries(served.token)
    assert delivery["secret_sent"] is True and delivery["status"] == 204


async def test_switching_the_language_on_the_page_switches_the_command_menu(
    served: ServedApp,
) -> None:
    """Catches a menu that stays in the old language after `bot_language` is saved: the owner
    switched the bot to English from the page and Telegram still showed the Chinese menu until
    the webhook was registered again."""
    async def menu() -> list[str]:
        return [c["description"] for c in (await bot_api(served, "getMyCommands"))["result"]]

    assert (await menu())[0] == "使用说明"  # registered by the fixture, in Chinese
    await served.configure(bot_language="en")
    assert await menu() == ["How to use", "Search mail: /search <words>",
                            "Summarize a mail: /summary <email_id>",
                            "Read a mail: /read <email_id>",
                            "Reply to a mail: /reply <email_id> <text>",
                            "AI summary consent: /ai on or /ai off"]
    await served.configure(bot_language="zh")
    assert (await menu())[0] == "使用说明"


async def test_help(served: ServedApp) -> None:
    await served.say("/help")
    [reply] = await served.replies(1)
    assert reply.startswith("使用说明：\n邮件到达后会先发送发件人、主题和时间等元数据通知。")


async def test_an_english_bot_answers_and_publishes_its_menu_in_english(
    served: ServedApp, fakellm_server: FakeLlm
) -> None:
    """Issue #16: catches bot_language not reaching the running worker (a saved "en" still
    answered in Chinese) or the command menu registered in Chinese for an English bot."""
    await served.configure(bot_language="en", **llm_wire(fakellm_server))
    registered = await served.client.post("/api/telegram/register-webhook", headers=served.admin,
                                          json={"callback_url": f"{served.url}/webhook/tg"})
    assert registered.status_code == 200, registered.text
    menu = {c["command"]: c["description"]
            for c in (await bot_api(served, "getMyCommands"))["result"]}
    assert menu == {"help": "How to use", "search": "Search mail: /search <words>",
                    "summary": "Summarize a mail: /summary <email_id>",
                    "read": "Read a mail: /read <email_id>",
                    "reply": "Reply to a mail: /reply <email_id> <text>",
                    "ai": "AI summary consent: /ai on or /ai off"}

    email_id = served.cyrus.append(subject="March invoice", body="Please pay 1200 EUR.").email_id
    said: list[str] = []
    # One at a time, as the owner reads each answer.
    for text in ("/help", f"/summary {email_id}", "today", f"/summary {email_id}",
                 "stop summaries"):
        await served.say(text)
        said = await served.replies(len(said) + 1)
        if text == "today":
            expiry = int(await served.redis.get(keys.consent_ai(served.chat)))
    help_text, without, granted, summary, revoked = said
    assert help_text.startswith("How to use:\nWhen a mail arrives, you first get a notification")
    assert without == ("Bob Example <bob@example.org> — March invoice\nTo consent, send "
                       "/ai on (1 hour), today, 7 days or until I revoke, then "
                       f"/summary {email_id} again.\nNo valid consent "
                       "(expired or never given); for an AI summary, choose a consent period "
                       "again.")
    assert granted == (f"AI summaries are on: today, until {local_time(expiry, ZONE)} ({ZONE}). "
                       "Ask for each one with /summary <email_id>")
    assert summary == SUMMARY
    assert revoked == "AI summary consent revoked"
    assert not await served.redis.exists(keys.consent_ai(served.chat))


async def test_consent_phrases_set_their_ttl_and_revoke_deletes_it(served: ServedApp) -> None:
    key = keys.consent_ai(served.chat)
    expected = [("临时一次", 3600, "临时1小时"), ("今天", 86400, "今天"), ("7天", 604800, "7天"),
                ("长期", 31536000, "直到撤销（最长365天）"), ("/ai on", 3600, "1小时")]
    for n, (phrase, ttl, label) in enumerate(expected, start=1):
        before = int(time.time())
        await served.say(phrase)
        reply = (await served.replies(n))[-1]
        expiry = int(await served.redis.get(key))
        assert before + ttl <= expiry <= int(time.time()) + ttl
        until = f"{local_time(expiry, ZONE)}（{ZONE}）"
        assert reply == (f"AI摘要授权已开启：{label}，到期时间 {until}；"
                         "仍需使用 /summary <email_id> 请求")
        assert ttl - 3 <= await served.redis.ttl(key) <= ttl
    await served.say("/ai off")
    assert (await served.replies(len(expected) + 1))[-1] == "AI摘要授权已撤销"
    assert not await served.redis.exists(key)


async def test_summary_with_and_without_consent(
    served: ServedApp, fakellm_server: FakeLlm
) -> None:
    await served.configure(**llm_wire(fakellm_server))
    email_id = served.cyrus.append(subject="March invoice", body="Please pay 1200 EUR.").email_id
    before = await fakellm_server.total_requests()
    await served.say(f"/summary {email_id}")
    [without] = await served.replies(1)
    assert without == (f"Bob Example <bob@example.org> — March invoice\n授权：发送 /ai on"
                       f"（1小时）、今天、7天 或 直到我撤销，然后再发送 /summary {email_id}。"
                       f"\n{HINT}")
    assert await fakellm_server.total_requests() == before  # no content left the server

    await served.say("/ai on")
    await served.say(f"/summary {email_id}")
    replies = await served.replies(3)
    assert replies[2] == SUMMARY and len(replies[2]) <= 300
    assert await fakellm_server.total_requests() == before + 1


async def test_summary_falls_back_to_the_excerpt_when_the_llm_fails(
    served: ServedApp, fakellm_server: FakeLlm
) -> None:
    await served.configure(**llm_wire(fakellm_server, "broken"))
    body = "Bitte bis Freitag bestätigen. " * 20
    email_id = served.cyrus.append(subject="Frist", body=body).email_id
    await served.say("今天")
    await served.say(f"/summary {email_id}")
    replies = await served.replies(2)
    assert replies[1] == body.strip()[:300]


async def test_search_against_real_mail(served: ServedApp) -> None:
    token = "zq" + "".join(random.choices(string.ascii_lowercase, k=10))
    hit = served.cyrus.append(subject=f"Contract {token}", body=f"the {token} contract")
    served.cyrus.index("alice")
    await served.say(f"/search {token}")
    [reply] = await served.replies(1)
    lines = reply.split("\n")
    assert lines[0] == f"搜索「{token}」：共 1 封匹配邮件"
    assert lines[1] == f"- Contract {token}（{hit.email_id}）"
    assert lines[2].startswith(f"  the {token} contract")  # Cyrus may add "..." to a preview


async def test_a_chat_outside_the_allowlist_gets_nothing(served: ServedApp) -> None:
    stranger = served.chat + 1
    assert await served.say("/help", chat_id=stranger) == 204  # refused: 204 (issue #23, 5)
    assert await served.emulator.sent_messages(served.token, stranger) == []
    assert await served.redis.xlen(keys.STREAM_TELEGRAM) == 0


async def test_register_webhook_refuses_bad_urls_and_reports_telegram_refusals(
    served: ServedApp,
) -> None:
    route = "/api/telegram/register-webhook"
    for body in ({}, {"callback_url": 5}, {"callback_url": "http://example.org/webhook/tg"},
                 {"callback_url": "https://user:pw@example.org/x"}, {"callback_url": "https://"},
                 {"callback_url": "ftp://example.org"}):
        response = await served.client.post(route, headers=served.admin, json=body)
        assert response.status_code == 400, body
        assert response.json()["error"] == "invalid_request"
    assert (await served.client.post(route, json={"callback_url": "https://a.example/x"})
            ).status_code == 401
    await served.emulator.fail(token=served.token, method="setWebhook", error_code=400)
    try:
        refused = await served.client.post(route, headers=served.admin,
                                           json={"callback_url": "https://a.example/webhook/tg"})
    finally:
        await served.emulator.clear_failures(served.token)
    assert refused.status_code == 502
    assert set(refused.json()) == {"error", "request_id"}
    assert refused.json()["error"] == "telegram_send_failed"
    assert "webhook-secret-SECRET" not in refused.text
    info = (await bot_api(served, "getWebhookInfo"))["result"]
    assert info["url"] == f"{served.url}/webhook/tg"  # the refused call changed nothing


async def test_odd_input_gets_the_documented_reply_or_none_and_is_handled_once(
    served: ServedApp,
) -> None:
    for text in ("x" * 10_000, "👍🎉🙂", "שלום, מה שלומך?", "/summary Mnosuchmail123"):
        assert await served.say(text) == 204
    secret = {"X-Telegram-Bot-Api-Secret-Token": "webhook-secret-SECRET"}
    chat = {"id": served.chat, "type": "private"}
    for update in (
        {"update_id": 990001, "edited_message": {"message_id": 1, "chat": chat, "text": "/help"}},
        {"update_id": 990002, "callback_query": {"id": "1", "data": "x"}},
        {"update_id": 990003, "message": {"message_id": 2, "chat": chat,
                                          "sticker": {"file_id": "s"}}},
    ):
        response = await served.client.post("/webhook/tg", headers=secret, json=update)
        assert response.status_code == 204, response.text
    await served.say("/help")  # a marker: replies are sent in order, per chat
    replies = await served.replies(1)
    assert len(replies) == 1 and replies[0].startswith("使用说明")
    async def done() -> bool:
        info = await served.redis.xpending(keys.STREAM_TELEGRAM, keys.CONSUMER_GROUP)
        return not info["pending"]
    await eventually(done, "every update worked off", 5)
    assert await served.redis.xlen(keys.dlq(keys.STREAM_TELEGRAM)) == 0
    assert len(await served.replies(1)) == 1  # nothing else was sent
    assert await served.redis.xlen(keys.STREAM_TELEGRAM) == 0  # finished entries are deleted
