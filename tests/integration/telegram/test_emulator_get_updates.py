"""The Bot API emulator's getUpdates, webhook hand-over and control routes, checked against what
Telegram's Bot API documentation says (https://core.telegram.org/bots/api#getupdates, #setwebhook,
#deletewebhook), so the long-polling receiver can be tested against an emulator that behaves
like Telegram. Each test plays the bot over HTTP against the real emulator process; none sleeps:
they wait on the emulator's long polls, its /control/updates wait, or the webhook's arrivals."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import BotChat
from tests.peers.telegram import TelegramEmulator

WEBHOOK_ACTIVE = ("Conflict: can't use getUpdates method while webhook is active; "
                  "use deleteWebhook to delete the webhook first")
OTHER_POLL = ("Conflict: terminated by other getUpdates request; "
              "make sure that only one bot instance is running")
BY_SET_WEBHOOK = "Conflict: terminated by setWebhook request"


class Hook:
    """A webhook endpoint on the test's event loop: records each POSTed Update, answers with the
    next of `statuses`, then `status`; `wait_for(n)` returns once n Updates arrived."""

    def __init__(self) -> None:
        self.updates: list[dict[str, Any]] = []
        self.statuses: list[int] = []
        self.status = 200
        self.url = ""
        self._arrived = asyncio.Condition()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/webhook/tg"

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            length = next((int(line.split(":", 1)[1]) for line in head.split("\r\n")
                           if line.lower().startswith("content-length:")), 0)
            body = json.loads(await reader.readexactly(length))
            status = self.statuses.pop(0) if self.statuses else self.status
            async with self._arrived:
                self.updates.append(body)
                self._arrived.notify_all()
            writer.write(f"HTTP/1.1 {status} Answer\r\nContent-Length: 0\r\n"
                         "Connection: close\r\n\r\n".encode())
            await writer.drain()
        finally:
            writer.close()

    async def wait_for(self, count: int, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        async with asyncio.timeout(timeout_s), self._arrived:
            await self._arrived.wait_for(lambda: len(self.updates) >= count)
        return list(self.updates)


@pytest.fixture
async def hook() -> AsyncIterator[Hook]:
    h = Hook()
    await h.start()
    yield h
    await h.close()


def ids(updates: Any) -> list[int]:
    return [int(u["update_id"]) for u in updates]


async def queued(emulator: TelegramEmulator, bot: BotChat, *texts: str) -> list[int]:
    """The human writes `texts` while the bot has no webhook; their update_ids."""
    out = []
    for text in texts:
        delivery = await emulator.send_user_message(bot.token, bot.chat_id, text)
        assert delivery.queued, delivery
        out.append(delivery.update_id)
    return out


# --- the queue: kept until confirmed ---------------------------------------------------------


async def test_an_update_is_returned_again_until_an_offset_confirms_it(
    telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    """Catches the package's getUpdates, which marks an update read as soon as it returns it:
    a bot that crashed before handling it would never see it again. Telegram keeps it until a
    call with a greater offset confirms it."""
    first, second = await queued(telegram_emulator, bot, "one", "two")

    for _ in range(2):
        answer = await telegram_emulator.get_updates(bot.token)
        assert answer.ok and ids(answer.result) == [first, second]
    assert [u["message"]["text"] for u in answer.result] == ["one", "two"]

    answer = await telegram_emulator.get_updates(bot.token, offset=first + 1)
    assert ids(answer.result) == [second]
    queue = await telegram_emulator.pending_updates(bot.token)
    assert queue.pending == [second] and queue.confirmed_offset == first + 1


async def test_confirmed_updates_are_forgotten(
    telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    """Catches confirmation that only hides updates from that one call: once an offset
    confirmed them, a call without offset (or an older one) must not bring them back."""
    first, second = await queued(telegram_emulator, bot, "one", "two")

    assert ids((await telegram_emulator.get_updates(bot.token, offset=second + 1)).result) == []
    assert (await telegram_emulator.get_updates(bot.token)).result == []
    assert (await telegram_emulator.get_updates(bot.token, offset=first)).result == []
    info = await telegram_emulator.bot_api(bot.token, "getWebhookInfo")
    assert info.result["pending_update_count"] == 0
    assert (await telegram_emulator.pending_updates(bot.token)).pending == []


async def test_a_negative_offset_returns_the_last_updates_and_forgets_the_earlier(
    telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    """Catches a negative offset read as 0 (everything) or as an update_id: -N returns the last
    N queued updates, and the earlier ones are forgotten, as the documentation says."""
    _, second, third = await queued(telegram_emulator, bot, "one", "two", "three")

    assert ids((await telegram_emulator.get_updates(bot.token, offset=-2)).result) == [
        second, third]
    assert ids((await telegram_emulator.get_updates(bot.token, offset=-1)).result) == [third]
    assert ids((await telegram_emulator.get_updates(bot.token)).result) == [third]
    assert (await telegram_emulator.pending_updates(bot.token)).pending == [third]


async def test_limit_caps_the_answer_and_is_clamped_to_1_100(
    telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    """Catches an ignored `limit` (the package's): at most `limit` updates, oldest first;
    values outside 1-100 are clamped like the Bot API server does, not refused."""
    first, second, third = await queued(telegram_emulator, bot, "a", "b", "c")

    assert ids((await telegram_emulator.get_updates(bot.token, limit=2)).result) == [
        first, second]
    assert ids((await telegram_emulator.get_updates(bot.token, limit=0)).result) == [first]
    assert ids((await telegram_emulator.get_updates(bot.token, limit=500)).result) == [
        first, second, third]


# --- long polling ----------------------------------------------------------------------------


async def test_a_long_poll_answers_as_soon_as_an_update_arrives(
    telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    """Catches a `timeout` that is ignored (the call answers [] at once, so a bot hot-loops) or
    served as a sleep (the update waits out the whole timeout)."""
    poll = asyncio.create_task(telegram_emulator.get_updates(bot.token, timeout_s=30))
    assert (await telegram_emulator.wait_for_long_poll(bot.token)).polling

    started = time.monotonic()
    delivery = await telegram_emulator.send_user_message(bot.token, bot.chat_id, "wake up")
    answer = await asyncio.wait_for(poll, 10)

    assert time.monotonic() - started < 5
    assert answer.ok and ids(answer.result) == [delivery.update_id]
    assert answer.result[0]["message"]["text"] == "wake up"
    assert not (await telegram_emulator.pending_updates(bot.token)).polling


async def test_a_long_poll_answers_empty_at_its_timeout(
    telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    """Catches a long poll that never ends (or ends at once) when nothing arrives: `timeout`
    seconds, then []."""
    started = time.monotonic()
    answer = await telegram_emulator.get_updates(bot.token, timeout_s=1)
    elapsed = time.monotonic() - started

    assert answer.ok and answer.result == []
    assert 0.9 <= elapsed < 5
    assert not (await telegram_emulator.pending_updates(bot.token)).polling


async def test_a_second_long_poll_ends_the_earlier_one_with_409(
    telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    """Catches two pollers of one bot both being served (the earlier poll must end with
    Telegram's 409 'terminated by other getUpdates request', so a second instance shows), and
    the newer poll being the one refused."""
    earlier = asyncio.create_task(telegram_emulator.get_updates(bot.token, timeout_s=30))
    assert (await telegram_emulator.wait_for_long_poll(bot.token)).polling
    newer = asyncio.create_task(telegram_emulator.get_updates(bot.token, timeout_s=30))

    ended = await asyncio.wait_for(earlier, 10)
    assert ended.status_code == 409 and ended.error_code == 409
    assert ended.description == OTHER_POLL
    assert not newer.done() and (await telegram_emulator.pending_updates(bot.token)).polling

    delivery = await telegram_emulator.send_user_message(bot.token, bot.chat_id, "hi")
    assert ids((await asyncio.wait_for(newer, 10)).result) == [delivery.update_id]


async def test_a_short_poll_leaves_an_open_long_poll_alone(
    telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    """Catches an emulator stricter than Telegram: the Bot API server ends the open long poll
    only when the new call waits too; a timeout=0 call answers [] and the long poll goes on."""
    poll = asyncio.create_task(telegram_emulator.get_updates(bot.token, timeout_s=30))
    assert (await telegram_emulator.wait_for_long_poll(bot.token)).polling

    short = await telegram_emulator.get_updates(bot.token)
    assert short.ok and short.result == []
    assert (await telegram_emulator.pending_updates(bot.token)).polling

    delivery = await telegram_emulator.send_user_message(bot.token, bot.chat_id, "still there")
    assert ids((await asyncio.wait_for(poll, 10)).result) == [delivery.update_id]


async def test_a_long_poll_whose_client_left_is_closed(
    telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    """Catches a long poll kept open after its client hung up: `polling` would lie, and the
    next poll would be answered a needless 409's worth of conflict."""
    poll = asyncio.create_task(telegram_emulator.get_updates(bot.token, timeout_s=30))
    assert (await telegram_emulator.wait_for_long_poll(bot.token)).polling
    poll.cancel()

    assert not (await telegram_emulator.wait_for_long_poll(bot.token, polling=False)).polling


# --- allowed_updates -------------------------------------------------------------------------


async def test_allowed_updates_filters_new_updates_and_is_remembered(
    telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    """Catches an ignored allowed_updates, one that holds only for the call that gave it, and a
    filter that hides updates queued before the call (the documentation: it does not affect
    updates created before; unwanted ones are dropped when they arrive)."""
    [early] = await queued(telegram_emulator, bot, "before the list")
    answer = await telegram_emulator.get_updates(bot.token, allowed_updates=["callback_query"])
    assert ids(answer.result) == [early]
    assert (await telegram_emulator.pending_updates(bot.token)).allowed_updates == [
        "callback_query"]

    late = await telegram_emulator.send_user_message(bot.token, bot.chat_id, "dropped")
    assert late.skipped and not late.queued
    pressed = await telegram_emulator.press_button(bot.token, bot.chat_id, None, "pick")
    assert pressed.queued

    answer = await telegram_emulator.get_updates(bot.token, offset=early + 1)  # no list: kept
    assert ids(answer.result) == [pressed.update_id]
    assert answer.result[0]["callback_query"]["data"] == "pick"
    info = await telegram_emulator.bot_api(bot.token, "getWebhookInfo")
    assert info.result["allowed_updates"] == ["callback_query"]

    answer = await telegram_emulator.get_updates(
        bot.token, offset=pressed.update_id + 1, allowed_updates=[])  # []: every type again
    assert answer.result == []
    assert (await telegram_emulator.pending_updates(bot.token)).allowed_updates is None
    [again] = await queued(telegram_emulator, bot, "back")
    assert ids((await telegram_emulator.get_updates(bot.token)).result) == [again]


@pytest.mark.parametrize("how", ["form", "json", "query"])
async def test_allowed_updates_is_read_from_form_json_body_and_query(
    telegram_emulator: TelegramEmulator, bot: BotChat, how: str
) -> None:
    """Catches a parameter read from one encoding only: PTB sends JSON text in a form, other
    clients a JSON body or the query string; Telegram accepts all three."""
    url = f"/bot{bot.token}/getUpdates"
    async with httpx.AsyncClient(base_url=telegram_emulator.base_url, trust_env=False) as http:
        if how == "form":
            response = await http.post(url, data={"allowed_updates": '["message"]'})
        elif how == "json":
            response = await http.post(url, json={"allowed_updates": ["message"]})
        else:
            response = await http.get(url, params={"allowed_updates": '["message"]'})
    assert response.status_code == 200, response.text
    assert (await telegram_emulator.pending_updates(bot.token)).allowed_updates == ["message"]
    pressed = await telegram_emulator.press_button(bot.token, bot.chat_id, None, "x")
    assert pressed.skipped


# --- webhooks and getUpdates -----------------------------------------------------------------


async def test_get_updates_answers_409_while_a_webhook_is_set(
    telegram_emulator: TelegramEmulator, bot: BotChat, hook: Hook
) -> None:
    """Catches getUpdates served while a webhook is set: Telegram refuses it with 409, and the
    queue is not touched by the refused call."""
    assert (await telegram_emulator.set_webhook(bot.token, hook.url)).ok

    answer = await telegram_emulator.get_updates(bot.token, timeout_s=30)

    assert answer.status_code == 409 and answer.description == WEBHOOK_ACTIVE
    assert not (await telegram_emulator.pending_updates(bot.token)).polling


async def test_set_webhook_ends_an_open_long_poll(
    telegram_emulator: TelegramEmulator, bot: BotChat, hook: Hook
) -> None:
    """Catches a long poll left open after setWebhook: it would answer later with updates the
    webhook also gets. The Bot API server ends it with 409 'terminated by setWebhook request'."""
    poll = asyncio.create_task(telegram_emulator.get_updates(bot.token, timeout_s=30))
    assert (await telegram_emulator.wait_for_long_poll(bot.token)).polling

    assert (await telegram_emulator.set_webhook(bot.token, hook.url)).ok
    ended = await asyncio.wait_for(poll, 10)

    assert ended.status_code == 409 and ended.description == BY_SET_WEBHOOK


async def test_delete_webhook_then_get_updates_works(
    telegram_emulator: TelegramEmulator, bot: BotChat, hook: Hook
) -> None:
    """Catches a deleteWebhook that leaves getUpdates refused, or that drops the queue without
    drop_pending_updates (and keeps it with drop_pending_updates=true)."""
    await telegram_emulator.set_webhook(bot.token, hook.url)
    deleted = await telegram_emulator.delete_webhook(bot.token)
    assert deleted.ok and deleted.result is True and deleted.description == "Webhook was deleted"
    again = await telegram_emulator.delete_webhook(bot.token)
    assert again.ok and again.description == "Webhook is already deleted"

    [kept] = await queued(telegram_emulator, bot, "after the webhook")
    assert ids((await telegram_emulator.get_updates(bot.token)).result) == [kept]

    dropped = await telegram_emulator.delete_webhook(bot.token, drop_pending_updates=True)
    assert dropped.ok
    assert (await telegram_emulator.get_updates(bot.token)).result == []
    info = await telegram_emulator.bot_api(bot.token, "getWebhookInfo")
    assert info.result["url"] == "" and info.result["pending_update_count"] == 0


async def test_pending_updates_go_to_a_newly_set_webhook_in_order(
    telegram_emulator: TelegramEmulator, bot: BotChat, hook: Hook
) -> None:
    """Catches updates stranded in the getUpdates queue when a webhook is set (Telegram hands
    them to the webhook), delivered out of order, or delivered again afterwards."""
    first, second = await queued(telegram_emulator, bot, "one", "two")
    pressed = await telegram_emulator.press_button(bot.token, bot.chat_id, None, "three")
    assert pressed.queued

    assert (await telegram_emulator.set_webhook(bot.token, hook.url)).ok
    delivered = await hook.wait_for(3)
    assert ids(delivered) == [first, second, pressed.update_id]

    fresh = await telegram_emulator.send_user_message(bot.token, bot.chat_id, "four")
    assert fresh.status == 200  # one at a time, in order: the backlog's answers came first
    assert ids(hook.updates) == [first, second, pressed.update_id, fresh.update_id]
    assert (await telegram_emulator.pending_updates(bot.token)).pending == []
    info = await telegram_emulator.bot_api(bot.token, "getWebhookInfo")
    assert info.result["pending_update_count"] == 0


async def test_set_webhook_with_drop_pending_updates_drops_the_queue(
    telegram_emulator: TelegramEmulator, bot: BotChat, hook: Hook
) -> None:
    """Catches drop_pending_updates ignored by setWebhook: the queued updates must not reach
    the new webhook; the next update is the first it gets."""
    await queued(telegram_emulator, bot, "old", "older")

    assert (await telegram_emulator.set_webhook(bot.token, hook.url,
                                                drop_pending_updates=True)).ok
    fresh = await telegram_emulator.send_user_message(bot.token, bot.chat_id, "new")

    assert fresh.status == 200
    assert ids(hook.updates) == [fresh.update_id]


async def test_a_failed_webhook_delivery_is_retried_not_lost(
    telegram_emulator: TelegramEmulator, bot: BotChat, hook: Hook
) -> None:
    """Catches a delivery that fails once and is forgotten (the package's, and this layer's
    before): Telegram keeps the update pending, counts it, and sends it again."""
    await telegram_emulator.set_webhook(bot.token, hook.url)
    hook.statuses = [500]

    delivery = await telegram_emulator.send_user_message(bot.token, bot.chat_id, "again")
    assert delivery.status == 500
    assert (await telegram_emulator.pending_updates(bot.token)).pending == [delivery.update_id]
    info = (await telegram_emulator.bot_api(bot.token, "getWebhookInfo")).result
    assert info["pending_update_count"] == 1
    assert info["last_error_message"].startswith("Wrong response from the webhook: 500")

    resent = await hook.wait_for(2)
    assert ids(resent) == [delivery.update_id, delivery.update_id]
    after = await telegram_emulator.send_user_message(bot.token, bot.chat_id, "next")
    assert after.status == 200  # behind the resend, so that one is recorded by now
    attempts = [(d["update_id"], d["attempt"], d["status"])
                for d in await telegram_emulator.webhook_deliveries(bot.token)]
    assert attempts == [(delivery.update_id, 1, 500), (delivery.update_id, 2, 200),
                        (after.update_id, 1, 200)]
    assert (await telegram_emulator.pending_updates(bot.token)).pending == []


async def test_setting_the_same_webhook_again_changes_nothing(
    telegram_emulator: TelegramEmulator, bot: BotChat, hook: Hook
) -> None:
    """Catches a repeated setWebhook (an app registers on every start) treated as a new
    webhook: the Bot API server answers 'Webhook is already set' and keeps the delivery state
    (the last error, the resend schedule); a drop_pending_updates call is a real change."""
    assert (await telegram_emulator.set_webhook(bot.token, hook.url, secret_token="s")).ok
    hook.statuses = [500]
    delivery = await telegram_emulator.send_user_message(bot.token, bot.chat_id, "x")
    assert delivery.status == 500

    again = await telegram_emulator.set_webhook(bot.token, hook.url, secret_token="s")
    assert again.ok and again.description == "Webhook is already set"
    info = (await telegram_emulator.bot_api(bot.token, "getWebhookInfo")).result
    assert info["last_error_message"].startswith("Wrong response from the webhook: 500")
    dropped = await telegram_emulator.set_webhook(bot.token, hook.url, secret_token="s",
                                                  drop_pending_updates=True)
    assert dropped.description == "Webhook was set"
    assert (await telegram_emulator.pending_updates(bot.token)).pending == []


async def test_an_update_failing_delivery_returns_to_get_updates_when_the_webhook_goes(
    telegram_emulator: TelegramEmulator, bot: BotChat, hook: Hook
) -> None:
    """Catches an update lost between the two ways of receiving: one the webhook keeps
    refusing must be in the getUpdates queue once the webhook is deleted."""
    await telegram_emulator.set_webhook(bot.token, hook.url)
    hook.status = 503
    delivery = await telegram_emulator.send_user_message(bot.token, bot.chat_id, "refused")
    assert delivery.status == 503

    await telegram_emulator.delete_webhook(bot.token)
    answer = await telegram_emulator.get_updates(bot.token)

    assert ids(answer.result) == [delivery.update_id]


async def test_a_new_webhook_gets_an_update_the_old_one_could_not_take(
    telegram_emulator: TelegramEmulator, bot: BotChat, hook: Hook
) -> None:
    """Catches an unreachable webhook's update lost (a connection error is a failed delivery
    too) or held back when another webhook is set: the new one gets it at once."""
    dead = Hook()
    await dead.start()
    dead_url = dead.url
    await dead.close()  # nothing listens there any more
    await telegram_emulator.set_webhook(bot.token, dead_url)
    delivery = await telegram_emulator.send_user_message(bot.token, bot.chat_id, "lost?")
    assert delivery.error is not None and delivery.status is None

    await telegram_emulator.set_webhook(bot.token, hook.url)

    assert ids(await hook.wait_for(1)) == [delivery.update_id]


# --- failures, calls, reset ------------------------------------------------------------------


async def test_failure_rules_apply_to_get_updates(
    telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    """Catches getUpdates escaping the failure rules (a test could then not show how the
    receiver handles 429 and 401), and a refused call that still confirms its offset."""
    [update_id] = await queued(telegram_emulator, bot, "keep me")
    await telegram_emulator.fail(token=bot.token, method="getUpdates", error_code=429,
                                 retry_after=7, times=1)

    limited = await telegram_emulator.get_updates(bot.token, offset=update_id + 1)
    assert limited.status_code == 429 and limited.retry_after == 7
    assert limited.description == "Too Many Requests: retry after 7"
    assert (await telegram_emulator.pending_updates(bot.token)).pending == [update_id]

    await telegram_emulator.reject_token(bot.token)
    try:
        started = time.monotonic()
        refused = await telegram_emulator.get_updates(bot.token, offset=update_id + 1,
                                                      timeout_s=30)
        assert refused.status_code == 401 and refused.description == "Unauthorized"
        assert time.monotonic() - started < 5  # refused at once, not after a long poll
    finally:
        await telegram_emulator.clear_failures(bot.token)
    assert ids((await telegram_emulator.get_updates(bot.token)).result) == [update_id]

    await telegram_emulator.fail(token=bot.token, method="getupdates", close=True, times=1)
    with pytest.raises(httpx.TransportError):
        await telegram_emulator.get_updates(bot.token)


async def test_calls_are_counted_per_token_and_method(
    telegram_emulator: TelegramEmulator, bot: BotChat
) -> None:
    """Catches a call log that misses refused calls or mixes methods or tokens: it is how a
    test shows that a client does not hot-loop on 409 or 401."""
    for _ in range(3):
        await telegram_emulator.get_updates(bot.token)
    await telegram_emulator.bot_api(bot.token, "getMe")
    await telegram_emulator.fail(token=bot.token, error_code=401, times=1)
    assert (await telegram_emulator.get_updates(bot.token)).status_code == 401

    calls = await telegram_emulator.api_calls(bot.token, "getUpdates")
    assert calls.count == 4 and calls.times_ms == sorted(calls.times_ms)
    assert abs(calls.times_ms[-1] / 1000 - time.time()) < 60
    assert (await telegram_emulator.api_calls(bot.token, "GETUPDATES")).count == 4
    assert (await telegram_emulator.api_calls(bot.token, "getMe")).count == 1
    assert (await telegram_emulator.api_calls(bot.token)).count == 5
    assert (await telegram_emulator.api_calls(bot.token + "x")).count == 0


async def test_reset_forgets_updates_polls_webhooks_and_calls(
    bot: BotChat, tmp_path: Path
) -> None:
    """Catches /control/reset leaving getUpdates state behind (a queue, a remembered
    allowed_updates, a call count, an open long poll) for the next test. An emulator of its
    own: resetting the session's one would pull the rug from other tests."""
    emulator = TelegramEmulator.start(tmp_path)
    try:
        await queued(emulator, bot, "left over")
        await emulator.get_updates(bot.token, allowed_updates=["message"])
        poll = asyncio.create_task(emulator.get_updates(bot.token + "2", timeout_s=30))
        assert (await emulator.wait_for_long_poll(bot.token + "2")).polling

        await emulator.reset()

        assert (await asyncio.wait_for(poll, 10)).result == []
        queue = await emulator.pending_updates(bot.token)
        assert (queue.pending, queue.confirmed_offset, queue.allowed_updates, queue.polling) == (
            [], 0, None, False)
        assert (await emulator.api_calls(bot.token)).count == 0
        assert (await emulator.get_updates(bot.token)).result == []
    finally:
        emulator.stop()
