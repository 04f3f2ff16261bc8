"""Telegram long polling (issue #22), against the real Bot API emulator and the real Cyrus: the
app is served in process, so nothing can call it, and it must still hear its owner."""

from __future__ import annotations

import itertools
import logging
import random
import string
import time

import pytest

from messageweave.config.model import parse_wire
from messageweave.pipeline import buttons, polling
from messageweave.store import keys, receivers
from tests.helpers import WAIT_S, eventually, ready_body, until_label, until_status
from tests.peers.telegram import SentMessage
from tests.served import ServedApp

HELP_EN = "How to use:"


async def test_help_is_answered_with_no_webhook_set(polled: ServedApp) -> None:
    """Catches: a bot that hears nothing without a public webhook (the home-router user)."""
    await polled.configure(bot_language="en")
    delivery = await polled.emulator.send_user_message(polled.token, polled.chat, "/help")
    assert delivery.queued  # no webhook: Telegram keeps it for getUpdates
    [reply] = await polled.emulator.wait_for_messages(polled.token, polled.chat, 1, WAIT_S)
    assert reply.text.startswith(HELP_EN)


async def test_search_is_answered_with_no_webhook_set(polled: ServedApp) -> None:
    """Catches: `/search` reaching the worker only through `/webhook/tg`."""
    word = "zp" + "".join(random.choices(string.ascii_lowercase, k=10))
    hit = polled.cyrus.append(subject=f"Invoice {word}", body=f"the {word} invoice")
    polled.cyrus.index("alice")
    await polled.emulator.send_user_message(polled.token, polled.chat, f"/search {word}")
    [reply] = await polled.emulator.wait_for_messages(polled.token, polled.chat, 1, WAIT_S)
    assert reply.text.split("\n")[1] == f"- Invoice {word}（{hit.email_id}）"


async def notification(polled: ServedApp, subject: str) -> tuple[str, SentMessage]:
    email_id = polled.append(subject)
    await polled.enqueue_mail(email_id)
    cfg = parse_wire(polled.wire)

    async def sent() -> bool:
        return bool(await _notified(polled, cfg, email_id))
    await eventually(sent, "the notification")
    return email_id, (await _notified(polled, cfg, email_id))[0]


async def _notified(polled: ServedApp, cfg: object, email_id: str) -> list[SentMessage]:
    out = []
    for message in await polled.emulator.sent_messages(polled.token, polled.chat):
        markup = message.params.get("reply_markup") or {}
        datas = [b["callback_data"] for row in markup.get("inline_keyboard", []) for b in row]
        if buttons.Button(buttons.READ, email_id) in [buttons.verify(cfg, d) for d in datas]:
            out.append(message)
    return out


async def test_a_button_press_is_answered_with_no_webhook_set(polled: ServedApp) -> None:
    """Catches: button presses (`callback_query`) left out of getUpdates' allowed_updates, or
    not taking the webhook's path to the worker."""
    _, message = await notification(polled, "Press me")
    markup = message.params["reply_markup"]["inline_keyboard"]
    data = markup[0][buttons.ACTIONS.index(buttons.READ)]["callback_data"]
    pressed = await polled.emulator.press_button(polled.token, polled.chat, message.message_id,
                                                 data)
    assert pressed.queued

    async def answered() -> bool:
        answers = await polled.emulator.callback_answers(polled.token)
        return any(a["callback_query_id"] == pressed.callback_id for a in answers)
    await eventually(answered, "the answer to the press")


async def test_the_offset_is_stored_after_the_update_is_queued(polled: ServedApp) -> None:
    """Catches: an offset confirmed to Telegram (or stored) before its update is durably in
    the stream; and an update answered twice when Telegram hands it out again."""
    first = await polled.emulator.send_user_message(polled.token, polled.chat, "/help")
    await polled.emulator.wait_for_messages(polled.token, polled.chat, 1, WAIT_S)

    async def stored() -> bool:
        offset = await receivers.read_offset(polled.redis, polled.token)
        return offset == first.update_id + 1
    await eventually(stored, "the offset past the answered update")
    async def confirmed() -> bool:  # with the next long poll
        return (await polled.emulator.pending_updates(polled.token)).pending == []
    await eventually(confirmed, "the update confirmed to Telegram")

    # Telegram delivers at least once: the same update again (the webhook way) is dropped.
    again = {"update_id": first.update_id, "message": {
        "message_id": 1, "date": 0, "chat": {"id": polled.chat, "type": "private"},
        "text": "/help"}}
    secret = {"X-Telegram-Bot-Api-Secret-Token": polled.wire["telegram_webhook_secret"]}
    assert (await polled.client.post("/webhook/tg", headers=secret, json=again)
            ).status_code == 204
    await polled.emulator.send_user_message(polled.token, polled.chat, "/help")
    await polled.emulator.wait_for_messages(polled.token, polled.chat, 2, WAIT_S)

    async def drained() -> bool:  # answered entries are deleted from the stream
        return await polled.redis.xlen(keys.STREAM_TELEGRAM) == 0
    await eventually(drained, "the stream worked off")
    replies = await polled.emulator.sent_messages(polled.token, polled.chat)
    assert len(replies) == 2, "the redelivered update was answered again"


async def test_a_stranger_is_recorded_once_and_not_answered(polled: ServedApp) -> None:
    """Catches: the allowlist skipped on the polling path, and a refused update fetched again
    and again (its offset never confirmed)."""
    stranger = polled.chat + 17
    await polled.emulator.send_user_message(polled.token, stranger, "/help", first_name="Eve")
    mine = await polled.emulator.send_user_message(polled.token, polled.chat, "/help")
    await polled.emulator.wait_for_messages(polled.token, polled.chat, 1, WAIT_S)

    async def confirmed() -> bool:
        return (await receivers.read_offset(polled.redis, polled.token)) == mine.update_id + 1
    await eventually(confirmed, "both updates confirmed")
    refused = (await polled.client.get("/api/telegram/refused-chats",
                                       headers=polled.admin)).json()["chats"]
    assert [(c["chat_id"], c["count"]) for c in refused] == [(stranger, 1)]
    assert await polled.emulator.sent_messages(polled.token, stranger) == []


async def acted_on_revision(polled: ServedApp, **keep: object) -> int:
    """Save the configuration again (no change) and wait eventually the receiving instance acted on
    that revision (its status names it): everything it was going to do with the old one is
    done, so a count taken now shows what it does with the new one."""
    await polled.configure(**keep)
    revision = int((await polled.client.get("/api/business-config", headers=polled.admin)
                    ).json()["revision"])

    async def acted() -> bool:
        status = await receivers.read_status(polled.redis, keys.UPDATES_STATUS)
        return status is not None and status.revision >= revision
    await eventually(acted, "the receiver acting on the new revision")
    return revision


async def test_401_stops_polling_until_the_token_changes(polled: ServedApp) -> None:
    """Catches: a refused token polled in a hot loop (Telegram bans that), and polling that
    never resumes once the owner fixed the token."""
    await polled.emulator.reject_token(polled.token)
    # The long poll in flight ends with this update; the next call is refused.
    await polled.emulator.send_user_message(polled.token, polled.chat, "/help")
    await until_status(polled, "updates", "degraded: Telegram refused the bot token")
    before = (await polled.emulator.api_calls(polled.token, "getUpdates")).count
    await acted_on_revision(polled)  # the same token: still nothing asked of Telegram
    status = await receivers.read_status(polled.redis, keys.UPDATES_STATUS)
    assert status is not None and status.state == "unauthorized"
    assert (await polled.emulator.api_calls(polled.token, "getUpdates")).count == before
    new_token = f"{random.randrange(10**8, 10**9)}:{'n' * 30}"
    await polled.configure(bot_token=new_token)
    await until_status(polled, "updates", "ok (polling)")
    await polled.emulator.send_user_message(new_token, polled.chat, "/help")
    await polled.emulator.wait_for_messages(new_token, polled.chat, 1, WAIT_S)


async def test_409_from_another_program_is_reported_and_backed_off(polled: ServedApp) -> None:
    """Catches: two programs polling one token fighting in a hot loop (each getUpdates ends
    the other's with 409 Conflict), and the conflict not said anywhere."""
    calls = 0
    # Another program polls with the same token: each of its calls ends ours with 409.
    for _ in range(12):
        answer = await polled.emulator.get_updates(polled.token, timeout_s=1)
        calls += 1
        if str((await ready_body(polled.client)).get("updates", "")).startswith(
                "degraded: another program"):
            break
    body = await ready_body(polled.client)
    assert str(body["updates"]).startswith("degraded: another program receives"), body
    times = (await polled.emulator.api_calls(polled.token, "getUpdates")).times_ms
    ours = len(times) - calls
    span_s = (times[-1] - times[0]) / 1000
    # Backed off: the first 409 is looked at once (a short poll: setWebhook ends a long poll
    # with a 409 too), from the second on every call waits at least half of the backoff's
    # 5 s step: far fewer calls of ours than a loop would make (one per answer).
    assert ours <= 3 + span_s / (polling.CONFLICT_BASE_S / 2), (ours, span_s)
    assert answer.status_code in (200, 409)


async def test_webhook_mode_does_not_poll(polled: ServedApp) -> None:
    """Catches: `telegram_updates: webhook` still consuming updates through getUpdates (a long
    poll in flight must end with the switch), and the page told all is well while no webhook
    is registered."""
    await polled.configure(telegram_updates="webhook")
    await until_label(polled.client, "updates", "degraded: no webhook is registered")
    polls = (await polled.emulator.api_calls(polled.token, "getUpdates")).count
    delivery = await polled.emulator.send_user_message(polled.token, polled.chat, "/help")
    await acted_on_revision(polled, telegram_updates="webhook")
    assert (await polled.emulator.api_calls(polled.token, "getUpdates")).count == polls
    assert delivery.update_id in (await polled.emulator.pending_updates(polled.token)).pending
    assert await polled.emulator.sent_messages(polled.token, polled.chat) == []


async def test_deleting_the_webhook_on_the_page_resumes_polling_at_once(
    polled: ServedApp,
) -> None:
    """Catches the owner who deleted a webhook on the page (`auto`) going unheard until the
    standby's next getWebhookInfo, `WEBHOOK_CHECK_S` later: the instance that deleted it looks
    again at once. The deletion comes right after a check, so without the wake the next
    getUpdates would be a whole interval away."""
    await polled.emulator.set_webhook(polled.token, "https://elsewhere.example/hook")
    await until_status(polled, "updates", "ok (webhook)")  # written just after a check
    polls = (await polled.emulator.api_calls(polled.token, "getUpdates")).count
    deleted_ms = time.time() * 1000
    deleted = await polled.client.post("/api/telegram/delete-webhook", headers=polled.admin)
    assert deleted.status_code == 200, deleted.text

    async def polling_again() -> bool:
        return (await polled.emulator.api_calls(polled.token, "getUpdates")).count > polls
    await eventually(polling_again, "a getUpdates after the deletion")
    first = (await polled.emulator.api_calls(polled.token, "getUpdates")).times_ms[polls]
    assert first - deleted_ms < polling.WEBHOOK_CHECK_S * 1000 / 2, first - deleted_ms
    await until_status(polled, "updates", "ok (polling)")


async def test_a_failed_webhook_check_is_logged_as_one_and_its_recovery_too(
    polled: ServedApp, caplog: pytest.LogCaptureFixture,
) -> None:
    """Catches an operator who chose `webhook` reading "telegram long poll failed" (no long
    poll is made in that mode: getWebhookInfo failed) and never reading that it recovered."""
    await polled.emulator.fail(token=polled.token, method="getWebhookInfo", close=True,
                               times=1)
    caplog.set_level(logging.INFO, logger="messageweave.pipeline.polling")
    await polled.configure(telegram_updates="webhook")  # the new revision: checked at once

    def lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == polling.__name__]

    async def recovered() -> bool:
        return any(line.startswith(f"{polling.CHECK_PLACE} recovered after 1 failure")
                   for line in lines())
    await eventually(recovered, lambda: f"the check's recovery logged: {lines()}")
    assert any(line.startswith(f"{polling.CHECK_PLACE} failed: ") for line in lines())
    assert not any(line.startswith(polling.PLACE) for line in lines()), lines()


async def test_429_waits_retry_after_and_network_errors_back_off(polled: ServedApp) -> None:
    """Catches: a 429's `retry_after` ignored (Telegram answers a client that keeps calling
    with longer bans) and a dropped connection retried in a hot loop; both are reported, and
    polling comes back by itself."""
    await polled.emulator.fail(token=polled.token, method="getUpdates", error_code=429,
                               retry_after=3, times=1)
    await polled.emulator.send_user_message(polled.token, polled.chat, "/help")  # ends the poll
    await until_status(polled, "updates", "degraded: Telegram asked us to slow down")
    calls = (await polled.emulator.api_calls(polled.token, "getUpdates")).times_ms

    async def called_again() -> bool:
        return (await polled.emulator.api_calls(polled.token, "getUpdates")).count > len(calls)
    await eventually(called_again, "a getUpdates after the 429")
    after = (await polled.emulator.api_calls(polled.token, "getUpdates")).times_ms
    assert after[len(calls)] - calls[-1] >= 2900, "called again before retry_after"
    await until_status(polled, "updates", "ok (polling)")

    rule_ms = time.time() * 1000
    await polled.emulator.fail(token=polled.token, method="getUpdates", close=True, times=3)
    await polled.emulator.send_user_message(polled.token, polled.chat, "/help")
    await until_status(polled, "updates", "degraded: Telegram is unreachable")
    await until_status(polled, "updates", "ok (polling)")
    times = [t for t in (await polled.emulator.api_calls(polled.token, "getUpdates")).times_ms
             if t > rule_ms]
    # The long poll in flight (begun before the rule) returns the /help; the next three calls
    # are dropped, each retried after a jittered backoff from 0.5-1 s, doubling; the fourth
    # answers.
    gaps = [b - a for a, b in itertools.pairwise(times[:4])]
    assert len(gaps) == 3 and all(gap >= 400 for gap in gaps), (times, gaps)
