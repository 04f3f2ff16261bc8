"""`POST /api/telegram/discover-chats` (issue #22): the chat id found from the bot token alone,
before anything is saved, against the real Bot API emulator and a real Redis."""

from __future__ import annotations

import httpx
import redis.asyncio as aioredis

from messageweave.store import refused
from tests.helpers import BotChat, assert_envelope, login, sample_wire
from tests.peers.telegram import TelegramEmulator

ROUTE = "/api/telegram/discover-chats"


async def _keys(redis: aioredis.Redis) -> list[str]:
    """Every key but the admin session (the login writes it)."""
    return sorted(k for k in await redis.keys("*") if k != "config:admin_session")


def _discover_keys(keys: list[str]) -> list[str]:
    """The keys but the one-time code, which a discovery makes."""
    return [key for key in keys if key != "telegram:discover_code"]


async def test_a_start_written_before_anything_is_saved_is_found_and_stays_unconfirmed(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, bot: BotChat,
    telegram_emulator: TelegramEmulator,
) -> None:
    """Catches the first hour's dead end: the chat id field said "write /start, then pick your
    chat", but the chats card filled only through a webhook, which needs a saved configuration,
    which needs the chat id. Also catches a discovery that confirms the updates (an `offset`
    would take them from the service's own poller later), stores anything but its code, or
    repeats what the owner wrote."""
    headers = await login(client)
    before = await _keys(redis_client)
    body = {"bot_token": bot.token, "telegram_api_base_url": telegram_emulator.base_url}
    first = await client.post(ROUTE, headers=headers, json=body)
    assert first.status_code == 200, first.text
    code = first.json()["code"]
    assert first.json() == {"chats": [], "conflict": False, "code": code,
                            "expires_in_s": first.json()["expires_in_s"],
                            "link": f"https://t.me/TestNameBot?start={code}"}
    assert 0 < first.json()["expires_in_s"] <= 600
    await telegram_emulator.send_user_message(
        bot.token, bot.chat_id, f"/start {code}", first_name="Ada", username="ada_l")
    group = -1_000_000_000_000 - bot.chat_id
    await telegram_emulator.send_user_message(bot.token, group, f"/start@TestNameBot {code}",
                                              chat_type="group", from_id=bot.chat_id + 1)
    await telegram_emulator.send_user_message(bot.token, bot.chat_id, "my secret words")
    response = await client.post(ROUTE, headers=headers, json=body)
    assert response.status_code == 200, response.text
    assert response.json()["chats"] == [
        {"chat_id": group, "name": "Test group", "type": "group", "user_id": bot.chat_id + 1},
        {"chat_id": bot.chat_id, "name": "Ada (@ada_l)", "type": "private",
         "user_id": bot.chat_id},
    ]
    assert "secret" not in response.text
    queue = await telegram_emulator.pending_updates(bot.token)
    assert len(queue.pending) == 3 and queue.confirmed_offset == 0
    assert _discover_keys(await _keys(redis_client)) == before
    again = await client.post(ROUTE, headers=headers, json=body)  # the code was spent
    assert again.json()["code"] != code and again.json()["chats"] == []


async def test_a_stranger_with_the_owners_name_is_not_offered_without_the_code(
    client: httpx.AsyncClient, bot: BotChat, telegram_emulator: TelegramEmulator,
) -> None:
    """Catches "Find my chat" handing the bot to a stranger (issue #32, finding 6): the latest
    writer was listed first, so anyone who knew the bot's name could write to it as
    `Alice (@alice)` after the owner and be picked with one click. Only the chat that sent the
    page's code is offered, with its sender's user id; an old code, a plain `/start`, a code in
    a longer text or a button press do not count."""
    headers = await login(client)
    body = {"bot_token": bot.token, "telegram_api_base_url": telegram_emulator.base_url}
    code = (await client.post(ROUTE, headers=headers, json=body)).json()["code"]
    owner, stranger = bot.chat_id, bot.chat_id + 7
    await telegram_emulator.send_user_message(bot.token, owner, f"/start {code}",
                                              first_name="Alice", username="alice")
    for text in ("/start", f"/start {code}0", f"hello /start {code}", "/start 0123456789"):
        await telegram_emulator.send_user_message(bot.token, stranger, text,
                                                  first_name="Alice", username="alice")
    response = await client.post(ROUTE, headers=headers, json=body)
    assert response.status_code == 200, response.text
    assert response.json()["chats"] == [
        {"chat_id": owner, "name": "Alice (@alice)", "type": "private", "user_id": owner}]
    without = await client.post(ROUTE, headers=headers, json=body)  # a new code: none sent it
    assert without.json()["chats"] == []


async def test_without_a_token_the_stored_one_is_asked(
    client: httpx.AsyncClient, bot: BotChat, telegram_emulator: TelegramEmulator,
) -> None:
    """Catches a route that needs the token re-typed once one is saved (the page never shows a
    stored secret back)."""
    headers = await login(client)
    saved = await client.put("/api/business-config", headers=headers, json=sample_wire(
        bot_token=bot.token, telegram_api_base_url=telegram_emulator.base_url))
    assert saved.status_code == 200, saved.text
    for body in (None, {}, {"bot_token": ""}):
        code = (await client.post(ROUTE, headers=headers, json=body)).json()["code"]
        await telegram_emulator.send_user_message(bot.token, bot.chat_id, f"/start {code}",
                                                  first_name="Grace", username="gh")
        response = await client.post(ROUTE, headers=headers, json=body)
        assert response.status_code == 200, response.text
        assert response.json()["chats"] == [{"chat_id": bot.chat_id, "name": "Grace (@gh)",
                                             "type": "private", "user_id": bot.chat_id}]


async def test_with_a_webhook_set_no_refused_chat_is_offered_and_it_says_so(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, bot: BotChat,
    telegram_emulator: TelegramEmulator,
) -> None:
    """Catches Telegram's 409 (a webhook is set: getUpdates is refused) shown as a failure, and
    (issue #32) the chats the webhook refused offered in its place: a refused chat's name is
    anyone's to choose, and nothing shows which of them sent the code."""
    headers = await login(client)
    await telegram_emulator.set_webhook(bot.token, "https://bot.example.com/webhook/tg")
    await refused.record(redis_client, bot.chat_id, "Ada (@ada_l)", 1)
    response = await client.post(ROUTE, headers=headers, json={
        "bot_token": bot.token, "telegram_api_base_url": telegram_emulator.base_url})
    assert response.status_code == 200, response.text
    assert response.json()["conflict"] is True and response.json()["chats"] == []


async def test_a_refused_token_is_a_422_naming_it_and_nothing_is_stored(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, bot: BotChat,
    telegram_emulator: TelegramEmulator,
) -> None:
    """Catches a wrong token answered as a 500, as an empty list (the user would wait for a
    chat that can never show), or stored on the way."""
    headers = await login(client)
    before = await _keys(redis_client)
    await telegram_emulator.reject_token(bot.token)
    body = {"bot_token": bot.token, "telegram_api_base_url": telegram_emulator.base_url}
    response = await client.post(ROUTE, headers=headers, json=body)
    assert_envelope(response, 422, "invalid_configuration")
    assert response.headers["x-config-error"] == "BOT_TOKEN was refused by Telegram"
    assert bot.token not in response.text
    await telegram_emulator.clear_failures(bot.token)
    await telegram_emulator.fail(token=bot.token, method="getUpdates", error_code=502,
                                 description="Bad Gateway")
    failed = await client.post(ROUTE, headers=headers, json=body)
    assert_envelope(failed, 502, "telegram_send_failed")
    assert failed.headers["x-telegram-error"] == "Bad Gateway"
    await telegram_emulator.clear_failures(bot.token)
    assert await _keys(redis_client) == before  # not even a code


async def test_a_bad_body_is_refused_before_telegram_is_called(
    client: httpx.AsyncClient, bot: BotChat, telegram_emulator: TelegramEmulator,
) -> None:
    """Catches a typo'd field ignored, a token a save would refuse sent to Telegram, and a
    plain-http Bot API address (the token would cross the network in the clear)."""
    headers = await login(client)
    cases = [({"token": bot.token}, 400, None),
             ({"bot_token": 123}, 400, None),
             ([bot.token], 400, None),
             ({}, 422, "missing or blank BOT_TOKEN"),
             ({"bot_token": "12 34"}, 422,
              "BOT_TOKEN may contain only printable ASCII characters, no space"),
             ({"bot_token": bot.token, "telegram_api_base_url": "http://api.example.com"}, 422,
              "TELEGRAM_API_BASE_URL must use HTTPS")]
    for body, status, message in cases:
        response = await client.post(ROUTE, headers=headers, json=body)
        assert_envelope(response, status, "invalid_request" if status == 400
                        else "invalid_configuration")
        assert response.headers.get("x-config-error") == message, body
    assert (await telegram_emulator.api_calls(bot.token)).count == 0
    assert_envelope(await client.post(ROUTE, json={"bot_token": bot.token}), 401, "unauthorized")
