"""`/start` answered (issue #34, item 2), end to end: the Bot API emulator plays the owner, a
member of a notification group and a stranger, through our HTTPS webhook (and, for "Find my
chat", through the service's own getUpdates poller); the in-process worker answers through the
emulator's sendMessage, in the configured `bot_language`."""

from __future__ import annotations

import itertools
import secrets

import httpx
import redis.asyncio as aioredis

from messageweave.chat import texts
from tests.helpers import WAIT_S, login
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import SentMessage, TelegramEmulator
from tests.served import ServedApp, served_app

GROUP = -1_009_876_543_299
OWNER, MEMBER = 5_550_101, 5_550_102
_bots = itertools.count(7_340_001)


async def _answer(served: ServedApp, chat_id: int, text: str, **sender: object) -> SentMessage:
    """`text` written in `chat_id` (by `sender`); the bot's first message there after it."""
    before = len(await served.emulator.sent_messages(served.token, chat_id))
    delivery = await served.emulator.send_user_message(served.token, chat_id, text, **sender)
    assert delivery.status == 204, delivery
    sent = await served.emulator.wait_for_messages(served.token, chat_id, before + 1, WAIT_S)
    return sent[before]


async def test_the_owners_start_is_greeted_in_chinese_then_in_english(served: ServedApp) -> None:
    """Catches `/start` never answered (issue #34: "1 update(s) needed no reply" while the page
    told the owner to send it), or answered in one language only. The greeting says what the
    bot does, that this chat is the owner's, and what to try next."""
    zh = (await _answer(served, served.chat, "/start")).text
    assert zh == (
        "你好！我是 MessageWeave 邮件助手：新邮件到达时我在这里通知你，"
        "你也可以在这个聊天中搜索、阅读和回复邮件。\n"
        "这个聊天已设置好，你是邮箱的主人。\n"
        "下一步：发送 /help 查看用法，或发送 /search <关键词> 搜索邮件。")
    await served.configure(bot_language="en")
    en = (await _answer(served, served.chat, "/start")).text
    assert en == (
        "Hello! I am MessageWeave, a mail assistant: I tell you here when new mail arrives, "
        "and you can search, read and answer your mail from this chat.\n"
        "This chat is set up, and you are the mailbox's owner.\n"
        "Next: send /help to see how to use me, or /search <words> to find a mail.")


async def test_a_group_member_is_told_the_chat_is_the_owners_in_both_languages(
    served: ServedApp,
) -> None:
    """Catches a member of a notification group greeted as the owner (told to /search a
    mailbox only the owner may read, issue #32), or told anything about the mailbox. The owner,
    in the same group, is greeted as the owner, with `/start@<bot>` as a group sends it."""
    await served.configure(telegram_chat_id=GROUP, chat_allowlist=[GROUP],
                           owner_user_ids=[OWNER])
    group = {"chat_type": "group"}
    member = (await _answer(served, GROUP, "/start", from_id=MEMBER, **group)).text
    assert member == texts.ZH["start_member"]
    assert "你不是邮箱的主人" in member and "/search" not in member
    owner = (await _answer(served, GROUP, "/start@TestNameBot", from_id=OWNER, **group)).text
    assert owner == texts.ZH["start_owner"]
    await served.configure(bot_language="en", telegram_chat_id=GROUP, chat_allowlist=[GROUP],
                           owner_user_ids=[OWNER])
    member = (await _answer(served, GROUP, "/start", from_id=MEMBER, **group)).text
    assert member.splitlines()[1] == (
        "You are not the mailbox's owner: only the owner can search, read or answer mail here.")
    for text in (member, owner):  # nothing of the mailbox: its user, server or mail
        assert "alice" not in text.lower() and "127.0.0.1" not in text


async def test_a_strangers_start_gets_nothing_while_the_owners_is_answered(
    served: ServedApp,
) -> None:
    """Catches a stranger's `/start` (a chat outside the allowlist, someone who guessed the
    bot's name) answered or queued: it must stay refused at the door (recorded for the page's
    refused chats, where the owner adds a chat), with no message sent to it, while the owner's
    own `/start`, sent after it, is answered."""
    stranger = served.chat + 10_000
    for text in ("/start", "/start 0123456789", "/start@TestNameBot"):
        assert await served.say(text, chat_id=stranger) == 204
    owner = await _answer(served, served.chat, "/start")
    assert owner.text == texts.ZH["start_owner"]
    assert await served.emulator.sent_messages(served.token, stranger) == []
    refused = await served.client.get("/api/telegram/refused-chats", headers=served.admin)
    assert [c["chat_id"] for c in refused.json()["chats"]] == [stranger]


async def test_the_find_my_chat_code_is_found_then_the_start_is_greeted_once_saved(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> None:
    """Catches the first hour's silence (issue #34): the owner sends `/start <code>` for "Find
    my chat" before anything is saved; the page must still find the chat by its code (issue
    #32), and once the configuration is saved the service's own poller takes that update and
    greets the owner, without repeating the code."""
    bot_id = next(_bots)
    token, chat = f"{bot_id}:{secrets.token_urlsafe(26)}", bot_id + 1_000_000
    headers = await login(client)
    body = {"bot_token": token, "telegram_api_base_url": telegram_emulator.base_url}
    code = (await client.post("/api/telegram/discover-chats", headers=headers,
                              json=body)).json()["code"]
    await telegram_emulator.send_user_message(token, chat, f"/start {code}", first_name="Ada")
    found = await client.post("/api/telegram/discover-chats", headers=headers, json=body)
    assert found.json()["chats"] == [
        {"chat_id": chat, "name": "Ada", "type": "private", "user_id": chat}]
    async with served_app(client, redis_client, cyrus, telegram_emulator, bot_token=token,
                          telegram_chat_id=chat, telegram_updates="auto", bot_language="en"):
        [greeting] = await telegram_emulator.wait_for_messages(token, chat, 1, WAIT_S)
    assert greeting.text == texts.EN["start_owner"]
    assert code not in greeting.text
