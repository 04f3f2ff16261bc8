"""A client's connection pools are built by its first call (issue #26: an idle instance pays
for none), once, whichever thread asks first; a closed client sends nothing."""

from __future__ import annotations

import asyncio
import threading

import pytest

from messageweave.chat.telegram import FailureClass, TelegramClient, TelegramSendError
from tests.helpers import BotChat
from tests.peers.telegram import TelegramEmulator


def test_concurrent_first_calls_from_threads_share_one_pool(bot: BotChat) -> None:
    client = TelegramClient(bot.token, api_base_url="http://127.0.0.1:9")
    start = threading.Barrier(8)
    pools: list[object] = []

    def first_call() -> None:
        start.wait(timeout=10)
        pools.append(client._pool(polls=False))

    threads = [threading.Thread(target=first_call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    asyncio.run(client.aclose())

    assert len(pools) == 8 and len({id(b) for b in pools}) == 1


async def test_a_client_closed_before_any_call_refuses_calls_without_sending(
    telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    client = TelegramClient(bot.token, api_base_url=telegram_emulator.base_url, timeout_s=5.0)
    await client.aclose()

    with pytest.raises(TelegramSendError) as failure:
        await client.send_text(bot.chat_id, "after close")

    assert failure.value.failure_class is FailureClass.TRANSIENT
    assert failure.value.maybe_sent is False
    assert await telegram_emulator.sent_messages(bot.token, bot.chat_id) == []
