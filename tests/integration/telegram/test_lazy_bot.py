"""python-telegram-bot stays out of memory until a client's first call that needs it: sends
(sendMessage), getMe and the poller's calls are bare httpx (issue #26), the rest go through
PTB."""

from __future__ import annotations

import asyncio
import json
import sys
import threading

import pytest

from messageweave.chat.telegram import FailureClass, TelegramClient, TelegramSendError
from tests.helpers import BotChat
from tests.peers.telegram import TelegramEmulator

# Run in a fresh interpreter: this test process has imported `telegram` long ago.
_FIRST_SEND = """
import asyncio, json, sys

import messageweave.app
import messageweave.cli
from messageweave.chat.telegram import TelegramClient

base_url, token, chat_id = sys.argv[1], sys.argv[2], int(sys.argv[3])


async def main() -> dict[str, object]:
    seen = {"after_import": "telegram" in sys.modules}
    async with TelegramClient(token, api_base_url=base_url, timeout_s=5.0) as client:
        seen["after_build"] = "telegram" in sys.modules
        # Concurrent first calls: each one needs the bot at once.
        sends = [client.send_text(chat_id, f"first {n}") for n in range(3)]
        seen["ids"] = [ids for ids in await asyncio.gather(*sends)]
        seen["after_send"] = "telegram" in sys.modules
        await client.get_me()
        seen["after_get_me"] = "telegram" in sys.modules
        await client.get_webhook_info()
        seen["after_ptb_call"] = "telegram" in sys.modules
    return seen


print(json.dumps(asyncio.run(main())))
"""


async def test_python_telegram_bot_is_imported_by_the_first_call_through_it_not_by_sends(
    telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _FIRST_SEND, telegram_emulator.base_url, bot.token,
        str(bot.chat_id), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    seen = json.loads(out)

    assert seen["after_import"] is False  # the app (and the CLI) import no PTB
    assert seen["after_build"] is False  # nor does a configuration's client
    assert seen["after_send"] is False  # sendMessage is bare
    assert seen["after_get_me"] is False  # so is getMe
    assert seen["after_ptb_call"] is True
    sent = await telegram_emulator.sent_messages(bot.token, bot.chat_id)
    assert sorted(m.text for m in sent) == ["first 0", "first 1", "first 2"]
    assert sorted(ids for [ids] in seen["ids"]) == sorted(m.message_id for m in sent)


def test_concurrent_first_calls_from_threads_share_one_bot(bot: BotChat) -> None:
    client = TelegramClient(bot.token, api_base_url="http://127.0.0.1:9")
    start = threading.Barrier(8)
    bots: list[object] = []

    def first_call() -> None:
        start.wait(timeout=10)
        bots.append(client._bot())

    threads = [threading.Thread(target=first_call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    asyncio.run(client.aclose())

    assert len(bots) == 8 and len({id(b) for b in bots}) == 1


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
