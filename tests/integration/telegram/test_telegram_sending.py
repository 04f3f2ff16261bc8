"""TelegramClient.send_text against the real Bot API emulator: texts, splitting, failure classes."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import httpx
import pytest

from messageweave.chat.telegram import (
    FailureClass,
    TelegramClient,
    TelegramSendError,
    utf16_len,
)
from tests.helpers import BotChat, closed_port
from tests.peers.telegram import TelegramEmulator

NOTIFICATION = (
    "From: Alice Example <alice@example.org>\n"
    "Subject: Quarterly numbers <draft> & *notes* _v2_\n"
    "Received: 2026-11-30 19:45"
)


async def test_notification_lands_in_the_chat_with_its_exact_text(
    tg_client: TelegramClient, telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    before_ms = time.time() * 1000
    ids = await tg_client.send_text(bot.chat_id, NOTIFICATION)
    after_ms = time.time() * 1000

    sent = await telegram_emulator.sent_messages(bot.token, bot.chat_id)
    assert [m.text for m in sent] == [NOTIFICATION]
    assert [m.message_id for m in sent] == ids
    assert sent[0].parse_mode is None  # plain text: no parse-mode surprises
    # the harness's store time, which bench/push.py times deliveries by (same host clock)
    assert before_ms - 1 <= sent[0].stored_ms <= after_ms + 1


async def test_a_5000_char_text_arrives_as_two_messages_in_order_with_content_intact(
    tg_client: TelegramClient, telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    lines = [f"line {n:04d} " + "x" * 40 for n in range(100)]
    text = "\n".join(lines)
    assert len(text) == 5099

    ids = await tg_client.send_text(bot.chat_id, text)

    sent = await telegram_emulator.sent_messages(bot.token, bot.chat_id)
    assert len(ids) == 2
    assert [m.message_id for m in sent] == ids
    assert all(utf16_len(m.text) <= 4096 for m in sent)
    assert sent[0].text.startswith("line 0000") and sent[1].text.endswith(lines[-1])
    assert "\n".join(m.text for m in sent) == text  # cut at a line break, nothing lost


async def test_emoji_text_is_cut_at_4096_utf16_units_without_breaking_a_pair(
    tg_client: TelegramClient, telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    text = "a" + "😀" * 3000  # 6001 UTF-16 units; 2047 emoji fit after the "a"

    await tg_client.send_text(bot.chat_id, text)

    sent = [m.text for m in await telegram_emulator.sent_messages(bot.token, bot.chat_id)]
    assert [utf16_len(t) for t in sent] == [4095, 6001 - 4095]
    assert "".join(sent) == text
    for chunk in sent:
        chunk.encode("utf-8")  # a lone surrogate would not encode


async def test_emulator_refuses_a_text_over_the_limit_so_splitting_is_really_checked(
    telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    async with httpx.AsyncClient(base_url=telegram_emulator.base_url, trust_env=False) as http:
        too_long = await http.post(
            f"/bot{bot.token}/sendMessage", json={"chat_id": bot.chat_id, "text": "😀" * 2049}
        )
        just_fits = await http.post(
            f"/bot{bot.token}/sendMessage", json={"chat_id": bot.chat_id, "text": "😀" * 2048}
        )
    assert too_long.status_code == 400
    assert too_long.json()["description"] == "Bad Request: message is too long"
    assert just_fits.status_code == 200


async def test_429_is_rate_limit_with_the_retry_after_telegram_gave(
    tg_client: TelegramClient, telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    await telegram_emulator.fail(
        token=bot.token, chat_id=bot.chat_id, error_code=429, retry_after=7
    )

    with pytest.raises(TelegramSendError) as caught:
        await tg_client.send_text(bot.chat_id, "hello")

    err = caught.value
    assert err.failure_class is FailureClass.RATE_LIMIT
    assert err.retry_after == 7.0
    assert err.retryable
    assert err.status_code == 429
    assert await telegram_emulator.sent_messages(bot.token, bot.chat_id) == []


@pytest.mark.parametrize(
    ("error_code", "description", "expected"),
    [
        (403, None, FailureClass.PERMISSION),  # Forbidden: bot was blocked by the user
        (403, "Forbidden: bot was kicked from the group chat", FailureClass.PERMISSION),
        (400, None, FailureClass.NOT_FOUND),  # Bad Request: chat not found
        (400, "Bad Request: can't parse entities", FailureClass.INVALID_PAYLOAD),
        (409, None, FailureClass.CONFLICT),
        (401, None, FailureClass.AUTH),
        (500, None, FailureClass.TRANSIENT),
        (502, None, FailureClass.TRANSIENT),
        (418, "I'm a teapot", FailureClass.UNKNOWN),
    ],
)
async def test_error_answers_are_classified(
    tg_client: TelegramClient,
    telegram_emulator: TelegramEmulator,
    bot: BotChat,
    error_code: int,
    description: str | None,
    expected: FailureClass,
) -> None:
    await telegram_emulator.fail(
        token=bot.token, chat_id=bot.chat_id, error_code=error_code, description=description
    )

    with pytest.raises(TelegramSendError) as caught:
        await tg_client.send_text(bot.chat_id, "hello")

    assert caught.value.failure_class is expected
    assert caught.value.status_code == error_code
    assert caught.value.retryable is (expected in (FailureClass.TRANSIENT, FailureClass.RATE_LIMIT))
    if description:
        assert caught.value.description == description


async def test_a_gateway_error_page_that_is_not_json_is_transient(
    tg_client: TelegramClient, telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    await telegram_emulator.fail(
        token=bot.token, error_code=503, raw_body="<html>503 Service Unavailable</html>"
    )

    with pytest.raises(TelegramSendError) as caught:
        await tg_client.send_text(bot.chat_id, "hello")

    assert caught.value.failure_class is FailureClass.TRANSIENT
    assert caught.value.description == "Service Unavailable"


async def test_wrong_token_is_auth(
    tg_client: TelegramClient, telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    await telegram_emulator.reject_token(bot.token)

    with pytest.raises(TelegramSendError) as on_send:
        await tg_client.send_text(bot.chat_id, "hello")
    with pytest.raises(TelegramSendError) as on_probe:
        await tg_client.get_me()

    assert on_send.value.failure_class is FailureClass.AUTH
    assert on_probe.value.failure_class is FailureClass.AUTH
    assert not on_send.value.retryable


async def test_a_stopped_emulator_is_transient(tmp_path: Path, bot: BotChat) -> None:
    stopped = TelegramEmulator.start(tmp_path)
    stopped.stop()
    async with TelegramClient(bot.token, stopped.base_url, timeout_s=2.0) as tg:
        with pytest.raises(TelegramSendError) as caught:
            await tg.send_text(bot.chat_id, "hello")

    assert caught.value.failure_class is FailureClass.TRANSIENT
    assert caught.value.retryable
    assert caught.value.status_code is None


async def test_a_dropped_connection_is_transient(
    tg_client: TelegramClient, telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    await telegram_emulator.fail(token=bot.token, close=True)

    with pytest.raises(TelegramSendError) as caught:
        await tg_client.send_text(bot.chat_id, "hello")

    assert caught.value.failure_class is FailureClass.TRANSIENT


async def test_a_call_slower_than_the_timeout_is_transient_and_bounded(
    telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    await telegram_emulator.fail(token=bot.token, delay_ms=3000)

    async with TelegramClient(bot.token, telegram_emulator.base_url, timeout_s=0.4) as tg:
        started = time.monotonic()
        with pytest.raises(TelegramSendError) as caught:
            await tg.send_text(bot.chat_id, "hello")
        elapsed = time.monotonic() - started

    assert caught.value.failure_class is FailureClass.TRANSIENT
    assert elapsed < 2.0


async def test_an_empty_text_is_refused_without_calling_telegram(
    tg_client: TelegramClient, telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    with pytest.raises(TelegramSendError) as caught:
        await tg_client.send_text(bot.chat_id, "  \n ")

    assert caught.value.failure_class is FailureClass.INVALID_PAYLOAD
    assert await telegram_emulator.sent_messages(bot.token, bot.chat_id) == []


async def test_the_token_never_reaches_logs_errors_or_reprs(
    telegram_emulator: TelegramEmulator,
    bot: BotChat,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    for name in ("", "httpx", "httpcore", "telegram", "telegram.Bot", "messageweave"):
        caplog.set_level(logging.DEBUG, logger=name)
    texts: list[str] = []

    async with TelegramClient(bot.token, telegram_emulator.base_url, timeout_s=2.0) as tg:
        texts.append(repr(tg))
        await tg.send_text(bot.chat_id, "a successful send")
        await tg.get_me()
        await telegram_emulator.fail(token=bot.token, error_code=403)
        with pytest.raises(TelegramSendError) as refused:
            await tg.send_text(bot.chat_id, "a refused send")
        texts += [str(refused.value), repr(refused.value)]
    stopped = TelegramEmulator.start(tmp_path)
    stopped.stop()
    async with TelegramClient(bot.token, stopped.base_url, timeout_s=2.0) as tg:
        with pytest.raises(TelegramSendError) as unreachable:
            await tg.send_text(bot.chat_id, "an unreachable send")
        texts += [str(unreachable.value), repr(unreachable.value)]

    logged = caplog.text + "".join(r.getMessage() for r in caplog.records)
    assert "HTTP Request: POST" in logged  # httpx did log its request lines...
    assert "<redacted>" in logged  # ...with the token cut out
    secret_part = bot.token.split(":", 1)[1]
    for text in [logged, *texts]:
        assert bot.token not in text
        assert secret_part not in text


async def test_no_bot_api_method_lets_the_token_into_a_log_an_error_or_a_repr(
    telegram_emulator: TelegramEmulator,
    bot: BotChat,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Guard (issue #38; passes before the change too): every method now goes down
    `TelegramClient.call`, the uploads, the button answers and the webhook set-up included
    (they went through python-telegram-bot, with its own redaction). Each one, refused by
    Telegram (401) and with the Bot API out of reach, must keep the token out of the logs, the
    error's text and its repr."""
    for name in ("", "httpx", "httpcore", "messageweave"):
        caplog.set_level(logging.DEBUG, logger=name)
    texts: list[str] = []

    async def every_method(tg: TelegramClient) -> None:
        calls = [
            tg.send_text(bot.chat_id, "a send"),
            tg.send_file(bot.chat_id, b"%PDF-1.4", "a.pdf", "application/pdf"),
            tg.send_file(bot.chat_id, b"\x89PNG", "a.png", "image/png", photo=True),
            tg.answer_callback_query("1", "done"),
            tg.edit_message_reply_markup(bot.chat_id, 1, None),
            tg.get_me(),
            tg.set_webhook("https://example.org/webhook/tg", "s" * 32),
            tg.webhook_url(),
            tg.delete_webhook(),
            tg.set_my_commands([("help", "Help")]),
            tg.get_updates(None, timeout_s=0),
        ]
        for call in calls:
            with pytest.raises(TelegramSendError) as failed:
                await call
            texts.extend([str(failed.value), repr(failed.value)])

    await telegram_emulator.fail(token=bot.token, error_code=401)
    try:
        async with TelegramClient(bot.token, telegram_emulator.base_url, timeout_s=2.0) as tg:
            await every_method(tg)
    finally:
        await telegram_emulator.clear_failures(bot.token)
    async with TelegramClient(bot.token, f"http://127.0.0.1:{closed_port()}",
                              timeout_s=2.0) as tg:
        await every_method(tg)

    logged = caplog.text + "".join(r.getMessage() for r in caplog.records)
    assert logged.count("HTTP Request: POST") >= 11  # httpx logged every refused call
    secret_part = bot.token.split(":", 1)[1]
    for text in [logged, *texts]:
        assert bot.token not in text
        assert secret_part not in text
