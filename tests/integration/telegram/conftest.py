"""Fixtures for tests against the real Telegram Bot API emulator (tests/peers/telegram.py)."""

from __future__ import annotations

import itertools
import secrets
from collections.abc import AsyncIterator

import pytest

from messageweave.chat.telegram import TelegramClient
from tests.helpers import BotChat
from tests.peers.telegram import TelegramEmulator

_bot_ids = itertools.count(7_000_001)


@pytest.fixture
def bot() -> BotChat:
    bot_id = next(_bot_ids)
    return BotChat(token=f"{bot_id}:{secrets.token_urlsafe(26)}", chat_id=bot_id + 1_000_000)


@pytest.fixture
async def tg_client(
    bot: BotChat, telegram_emulator: TelegramEmulator
) -> AsyncIterator[TelegramClient]:
    tg = TelegramClient(bot.token, api_base_url=telegram_emulator.base_url, timeout_s=5.0)
    yield tg
    await tg.aclose()
