"""Bot set-up calls against the real emulator: getMe, setWebhook/getWebhookInfo, commands, and
what the emulator's webhook delivery looks like to a receiver (the secret header)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from messageweave.chat.telegram import BotIdentity, TelegramClient
from tests.helpers import BotChat
from tests.peers.telegram import TelegramEmulator

SECRET = "webhook-Secret_42"


class Receiver:
    """A tiny webhook endpoint in a thread: records each POST, answers `status`."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.status = 200
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver.requests.append((dict(self.headers.items()), json.loads(body)))
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/webhook/tg"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


async def test_get_me_answers_with_the_bot_identity(tg_client: TelegramClient) -> None:
    assert await tg_client.get_me() == BotIdentity(
        id=666, username="TestNameBot", first_name="Test First name"
    )


async def test_set_webhook_then_webhook_url_returns_the_url(
    tg_client: TelegramClient,
    telegram_emulator: TelegramEmulator,
    bot: BotChat,
    receiver: Receiver,
) -> None:
    assert await tg_client.webhook_url() == ""

    await tg_client.set_webhook(receiver.url, SECRET)

    assert await tg_client.webhook_url() == receiver.url
    async with httpx.AsyncClient(base_url=telegram_emulator.base_url, trust_env=False) as http:
        info = (await http.post(f"/bot{bot.token}/getWebhookInfo")).json()["result"]
    assert info["allowed_updates"] == ["message"]


async def test_set_my_commands_publishes_the_menu(
    tg_client: TelegramClient, telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    await tg_client.set_my_commands([("search", "Search mail"), ("summary", "Summarize a mail")])

    async with httpx.AsyncClient(base_url=telegram_emulator.base_url, trust_env=False) as http:
        answer = (await http.post(f"/bot{bot.token}/getMyCommands")).json()
    assert answer["result"] == [
        {"command": "search", "description": "Search mail"},
        {"command": "summary", "description": "Summarize a mail"},
    ]


async def test_a_user_message_reaches_the_webhook_with_the_secret_header(
    tg_client: TelegramClient,
    telegram_emulator: TelegramEmulator,
    bot: BotChat,
    receiver: Receiver,
) -> None:
    await tg_client.set_webhook(receiver.url, SECRET)

    delivery = await telegram_emulator.send_user_message(bot.token, bot.chat_id, "/search invoice")

    assert delivery.status == 200 and not delivery.queued
    [(headers, update)] = receiver.requests
    assert headers["X-Telegram-Bot-Api-Secret-Token"] == SECRET
    assert update["update_id"] == delivery.update_id
    message = update["message"]
    assert message["text"] == "/search invoice"
    assert message["chat"] == {"id": bot.chat_id, "first_name": "Test", "type": "private"}
    assert message["from"]["is_bot"] is False
    assert message["entities"] == [{"type": "bot_command", "offset": 0, "length": 7}]
    assert "botToken" not in message


async def test_a_refused_delivery_is_recorded_and_the_emulator_stays_up(
    tg_client: TelegramClient,
    telegram_emulator: TelegramEmulator,
    bot: BotChat,
    receiver: Receiver,
) -> None:
    await tg_client.set_webhook(receiver.url, SECRET)
    receiver.status = 403

    delivery = await telegram_emulator.send_user_message(bot.token, bot.chat_id, "hello")

    assert delivery.status == 403
    assert telegram_emulator.running
    assert await tg_client.get_me()
    [record] = await telegram_emulator.webhook_deliveries(bot.token)
    assert record["status"] == 403 and record["secret_sent"] is True


async def test_without_a_webhook_user_messages_wait_for_get_updates(
    telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    delivery = await telegram_emulator.send_user_message(bot.token, bot.chat_id, "hi")

    assert delivery.queued
    async with httpx.AsyncClient(base_url=telegram_emulator.base_url, trust_env=False) as http:
        updates = (await http.post(f"/bot{bot.token}/getUpdates")).json()["result"]
    assert [u["message"]["text"] for u in updates] == ["hi"]
