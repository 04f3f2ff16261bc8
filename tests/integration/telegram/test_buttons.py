"""The buttons under a notification (issue #16), end to end: Cyrus has the mail, the worker
sends its notification with the keyboard to the Bot API emulator, the emulator plays the
owner pressing a button (a `callback_query` to our HTTPS webhook), and the effect is read back
from Cyrus (`$seen`, the mail in the archive mailbox) and from the emulator (the answer to the
press, the edited keyboard)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from messageweave.config.model import parse_wire
from messageweave.mail.jmap import JmapClient
from messageweave.pipeline import buttons
from messageweave.pipeline.governor import Governor, bot_id
from messageweave.store import keys
from tests.helpers import WAIT_S, FreshUser, eventually, keyboard, press
from tests.peers.telegram import SentMessage
from tests.served import ServedApp

HINT = "授权已到期或尚未授权；如需 AI 摘要，请重新选择授权期限。"


@pytest.fixture
async def mailbox(served: ServedApp) -> AsyncIterator[JmapClient]:
    """Our own look at alice's mailbox in Cyrus, to check what a press changed."""
    wire = served.wire
    async with JmapClient(wire["jmap_session_url"], wire["jmap_username"],
                          wire["jmap_password"], timeout=10) as client:
        yield client


async def notified(served: ServedApp, subject: str, chat: int | None = None,
                   user: str = "alice") -> tuple[str, SentMessage]:
    """A new mail in Cyrus, queued like the reconcile queues it; its notification (the first
    message whose Mark read button names the mail: a periodic reconcile pass may notify it
    too)."""
    email_id = served.cyrus.append(subject=subject, user=user).email_id
    await served.enqueue_mail(email_id, account_id=user)
    cfg = parse_wire(served.wire)
    found: list[SentMessage] = []

    async def sent() -> bool:
        found[:] = [m for m in await served.emulator.sent_messages(served.token)
                    if buttons.Button(buttons.READ, email_id)
                    in [buttons.verify(cfg, data) for _, data in keyboard(m)]]
        return bool(found)
    await eventually(sent, f"the notification of {subject!r}", WAIT_S)
    assert chat is None or found[0].chat_id == chat
    return email_id, found[0]


def data_of(message: SentMessage, action: str) -> str:
    return keyboard(message)[buttons.ACTIONS.index(action)][1]


async def replied(served: ServedApp, chat: int) -> SentMessage:
    """The bot's reply in `chat` that ends with the consent hint."""
    found: list[SentMessage] = []

    async def sent() -> bool:
        found[:] = [m for m in await served.emulator.sent_messages(served.token, chat)
                    if m.text.endswith(HINT)]
        return bool(found)
    await eventually(sent, "the reply ending with the consent hint", WAIT_S)
    return found[0]


async def edited(served: ServedApp, message: SentMessage,
                 texts: list[str]) -> list[tuple[str, str]]:
    """Wait until the keyboard under `message` reads `texts`."""
    shown: list[tuple[str, str]] = []

    async def reads() -> bool:
        [now] = [m for m in await served.emulator.sent_messages(served.token, message.chat_id)
                 if m.message_id == message.message_id]
        shown[:] = keyboard(now)
        return [text for text, _ in shown] == texts
    await eventually(reads, lambda: f"the keyboard reading {texts} (it reads {shown})", WAIT_S)
    return shown


async def test_every_notification_has_the_three_buttons(served: ServedApp) -> None:
    """Catches a notification sent without the keyboard, or with buttons the bot cannot read
    (and, issue #25, without the Read button in a row of its own)."""
    email_id, message = await notified(served, "Invoice 17", served.chat)
    assert [text for text, _ in keyboard(message)] == ["摘要", "标为已读", "归档", "阅读全文"]
    cfg = parse_wire(served.wire)
    assert [buttons.verify(cfg, data) for _, data in keyboard(message)] == [
        buttons.Button(action, email_id) for action in (*buttons.ACTIONS, buttons.READ_MAIL)]


async def test_mark_read_sets_seen_in_cyrus_and_shows_read(
    served: ServedApp, mailbox: JmapClient
) -> None:
    """Catches a Mark read that answers but does not change the mail, or leaves the keyboard
    as it was."""
    email_id, message = await notified(served, "Mark me read")
    [mail] = await mailbox.get_emails([email_id])
    assert "$seen" not in mail.keywords
    answer = await press(served, message, data_of(message, buttons.READ))
    assert answer["text"] == "已标为已读"
    [mail] = await mailbox.get_emails([email_id])
    assert "$seen" in mail.keywords
    await edited(served, message, ["摘要", "✓ 已读", "归档", "阅读全文"])


async def test_archive_moves_the_mail_to_the_archive_mailbox(
    served: ServedApp, mailbox: JmapClient
) -> None:
    """Catches an Archive that copies instead of moving, or picks the wrong mailbox."""
    email_id, message = await notified(served, "Archive me")
    [archive] = [m.id for m in await mailbox.mailboxes() if m.role == "archive"]
    answer = await press(served, message, data_of(message, buttons.ARCHIVE))
    assert answer["text"] == "已归档"
    [mail] = await mailbox.get_emails([email_id])
    assert mail.mailbox_ids == {archive}
    await edited(served, message, ["摘要", "标为已读", "✓ 已归档", "阅读全文"])


async def test_archive_creates_the_archive_mailbox_when_there_is_none(
    served: ServedApp,
) -> None:
    """Catches an Archive that fails (or files the mail nowhere) on an account without an
    archive mailbox: one named Archive with that role is created in Cyrus and holds the mail."""
    user, password = f"noarchive{time.monotonic_ns() % 10**9}", "pw-noarchive-1"
    served.cyrus.add_user(user, password)
    async with JmapClient(served.wire["jmap_session_url"], user, password,
                          timeout=10) as account:
        [archive] = [m.id for m in await account.mailboxes() if m.role == "archive"]
        account_id = account.account_id
        # Cyrus creates every new user's Archive; take it away as the operator could.
        await account.call([("Mailbox/set", {"accountId": account_id,
                                             "update": {archive: {"role": None}}}, "0")])
        await account.call([("Mailbox/set", {"accountId": account_id,
                                             "destroy": [archive]}, "0")])
        assert all(m.role != "archive" for m in await account.mailboxes())
        await served.configure(jmap_username=user, jmap_password=password)
        email_id, message = await notified(served, "File me", user=user)
        answer = await press(served, message, data_of(message, buttons.ARCHIVE))
        assert answer["text"] == "已归档"
        [created] = [m for m in await account.mailboxes() if m.role == "archive"]
        assert created.name == "Archive" and created.parent_id is None
        [mail] = await account.get_emails([email_id])
        assert mail.mailbox_ids == {created.id}


async def test_summary_without_consent_gets_the_consent_hint(served: ServedApp) -> None:
    """Catches a Summary button that skips the consent check (content would leave the server)
    or does not answer the press."""
    email_id, message = await notified(served, "Quarterly report")
    answer = await press(served, message, data_of(message, buttons.SUMMARY))
    assert answer["text"] is None  # answered at once; the reply is a message
    reply = await replied(served, served.chat)
    assert reply.text == (f"Bob Example <bob@example.org> — Quarterly report\n授权：发送 /ai on"
                          f"（1小时）、今天、7天 或 直到我撤销，然后再发送 /summary {email_id}。"
                          f"\n{HINT}")
    assert not await served.redis.exists(keys.button_action(buttons.SUMMARY, email_id))


async def test_a_forged_press_is_refused_answered_and_changes_nothing(
    served: ServedApp, mailbox: JmapClient
) -> None:
    """Catches a press acted on without checking its signature: data naming another mail,
    or another action, or made up, is answered with a notice and changes no mail."""
    email_id, message = await notified(served, "Mine")
    other_id, _ = await notified(served, "Someone else's")
    [inbox] = [m.id for m in await mailbox.mailboxes() if m.role == "inbox"]
    read = data_of(message, buttons.READ)
    for forged in (read[:-len(email_id)] + other_id,  # this mail's signature, another id
                   buttons.ARCHIVE + read[1:],  # Mark read's signature, another action
                   "r" + "A" * 16 + other_id):
        answer = await press(served, message, forged)
        assert answer["text"] == "这个按钮已失效"
    for mail in await mailbox.get_emails([email_id, other_id]):
        assert "$seen" not in mail.keywords and mail.mailbox_ids == {inbox}
    assert not await served.redis.keys("a:{default}:button:*")
    [now] = [m for m in await served.emulator.sent_messages(served.token, served.chat)
             if m.message_id == message.message_id]
    assert keyboard(now) == keyboard(message)


async def test_a_press_whose_data_is_not_ascii_is_answered_no_longer_valid(
    served: ServedApp, mailbox: JmapClient
) -> None:
    """Catches `buttons.verify` comparing `str` MACs with `hmac.compare_digest`, which raises
    TypeError on non-ASCII data (issue #32, finding 9): a traceback, a dead letter and a
    spinner that never stops instead of "no longer valid"."""
    email_id, message = await notified(served, "Not ASCII")
    read = data_of(message, buttons.READ)
    for forged in (read[0] + "é" * 16 + email_id, read[0] + read[1:16] + "…" + read[17:]):
        answer = await press(served, message, forged)
        assert answer["text"] == "这个按钮已失效"
    [mail] = await mailbox.get_emails([email_id])
    assert "$seen" not in mail.keywords
    assert await served.redis.xlen(keys.dlq(keys.STREAM_TELEGRAM)) == 0


async def test_a_button_pressed_twice_does_the_work_once(
    served: ServedApp, mailbox: JmapClient
) -> None:
    """Catches a second press that redoes the work: after the first Mark read the owner marks
    the mail unread in the mail client, and the second press leaves it unread."""
    email_id, message = await notified(served, "Press me twice")
    read = data_of(message, buttons.READ)
    await press(served, message, read)
    [mail] = await mailbox.get_emails([email_id])
    assert "$seen" in mail.keywords
    await mailbox.update_email(email_id, {"keywords/$seen": None})
    answer = await press(served, message, read)
    assert answer["text"] == "已经处理过了"
    [mail] = await mailbox.get_emails([email_id])
    assert "$seen" not in mail.keywords
    assert await served.redis.get(keys.button_action(buttons.READ, email_id)) == "done"


async def test_english_buttons_and_notices(served: ServedApp) -> None:
    """Catches a button or notice left in Chinese when the bot speaks English."""
    await served.configure(bot_language="en")
    _, message = await notified(served, "In English")
    assert [text for text, _ in keyboard(message)] == ["Summary", "Mark read", "Archive",
                                                      "Read"]
    answer = await press(served, message, data_of(message, buttons.READ))
    assert answer["text"] == "Marked as read"
    await edited(served, message, ["Summary", "✓ Read", "Archive", "Read"])
    answer = await press(served, message, "x")
    assert answer["text"] == "This button is no longer valid"


async def test_a_rule_routed_notification_keeps_its_buttons_and_topic(
    served: ServedApp, mailbox: JmapClient
) -> None:
    """Catches buttons missing under a notification a rule sent to another chat's forum
    topic, and a Summary reply sent outside that topic."""
    team = served.chat + 500_000
    await served.configure(chat_allowlist=[served.chat, team], notify_rules=[
        {"name": "team", "from": "@example.org", "chat_id": team, "thread_id": 42}])
    email_id, message = await notified(served, "For the team", team)
    assert message.params.get("message_thread_id") in (42, "42")
    await press(served, message, data_of(message, buttons.READ))
    [mail] = await mailbox.get_emails([email_id])
    assert "$seen" in mail.keywords
    await press(served, message, data_of(message, buttons.SUMMARY), from_id=served.chat)  # owner
    reply = await replied(served, team)
    assert reply.params.get("message_thread_id") in (42, "42")


async def test_a_press_from_a_chat_outside_the_allowlist_is_refused(served: ServedApp) -> None:
    """Catches a press queued (and acted on) from a chat the owner never allowed."""
    _, message = await notified(served, "Not for strangers")
    stranger = await served.emulator.press_button(served.token, served.chat + 1, None,
                                                  data_of(message, buttons.READ))
    assert stranger.status == 204  # refused, answered 204 so Telegram does not resend it
    assert await served.redis.xlen(keys.STREAM_TELEGRAM) == 0


async def test_a_redelivered_press_is_handled_once(served: ServedApp) -> None:
    """Catches a press Telegram delivers twice (same update_id) being worked twice: the
    second delivery needs the secret, is acknowledged and is not queued."""
    _, message = await notified(served, "Delivered twice")
    data = data_of(message, buttons.READ)
    pressed = await served.emulator.press_button(served.token, served.chat,
                                                 message.message_id, data)
    assert pressed.status == 204
    await served.emulator.wait_for_answers(served.token, 1)
    queued = (await served.redis.xinfo_stream(keys.STREAM_TELEGRAM))["last-generated-id"]
    again = {"update_id": pressed.update_id, "callback_query": {
        "id": pressed.callback_id, "from": {"id": served.chat, "is_bot": False,
                                            "first_name": "Test"},
        "chat_instance": "ci", "data": data,
        "message": {"message_id": message.message_id, "date": message.date,
                    "chat": {"id": served.chat, "type": "private"}}}}
    secret = {"X-Telegram-Bot-Api-Secret-Token": served.wire["telegram_webhook_secret"]}
    assert (await served.client.post("/webhook/tg", json=again)).status_code == 401
    assert (await served.client.post("/webhook/tg", headers=secret, json=again)
            ).status_code == 204
    info = await served.redis.xinfo_stream(keys.STREAM_TELEGRAM)
    assert info["last-generated-id"] == queued  # nothing was added for the redelivery


async def test_archive_uses_a_top_level_archive_mailbox_without_the_role(
    fresh: FreshUser,
) -> None:
    """Catches a second "Archive" attempted (Cyrus refuses the name) when the account has one
    without the role: the mail goes there and the mailbox is left as it was."""
    client = fresh.client
    [archive] = [m.id for m in await client.mailboxes() if m.role == "archive"]
    await client.call([("Mailbox/set", {"accountId": client.account_id,
                                        "update": {archive: {"role": None}}}, "0")])
    assert await client.archive_mailbox() == archive
    assert [m.role for m in await client.mailboxes() if m.id == archive] == [None]


async def test_a_mail_the_mailbox_no_longer_has_is_not_updated(fresh: FreshUser) -> None:
    """Catches a notFound answer taken for success (the press would say "Marked as read")."""
    await fresh.client.get_session()
    gone = await fresh.client.update_email("Mnosuchmail0000000000000", {"keywords/$seen": True})
    assert gone is False


async def test_a_press_while_the_mailbox_refuses_us_is_answered_and_done_on_retry(
    served: ServedApp,
) -> None:
    """Catches a press lost (never answered, never done) when JMAP fails at that moment: the
    owner is told it will be retried, and the retry marks the mail read once Cyrus lets us in
    again (a real fault: the account's password changed meanwhile, then changed back)."""
    user, password = f"flaky{time.monotonic_ns() % 10**9}", "pw-flaky-1"
    served.cyrus.add_user(user, password)
    headers = served.admin
    retries = {"jmap_timeout_ms": 10000, "telegram_timeout_ms": 5000, "llm_timeout_ms": 5000,
               "max_retries": 4}
    assert (await served.client.put("/api/config", headers=headers, json=retries)
            ).status_code == 200
    await served.configure(jmap_username=user, jmap_password=password)
    email_id, message = await notified(served, "Try again", user=user)
    served.cyrus.add_user(user, "pw-changed-2")
    answer = await press(served, message, data_of(message, buttons.READ))
    assert answer["text"] == "暂时连不上邮件服务器，稍后会自动重试"
    served.cyrus.add_user(user, password)
    await edited(served, message, ["摘要", "✓ 已读", "归档", "阅读全文"])
    async with JmapClient(served.wire["jmap_session_url"], user, password, timeout=10) as own:
        [mail] = await own.get_emails([email_id])
    assert "$seen" in mail.keywords


async def test_under_a_429_pause_a_press_is_answered_at_once_and_its_keyboard_edit_waits(
    served: ServedApp,
) -> None:
    """Catches (issue #38) a button press whose keyboard edit went around the rate governor:
    while a 429 holds the chat's lane (`Governor.pause`, which a sendMessage's 429 sets),
    Telegram would refuse the edit again and prolong the flood wait; the edit must wait for the
    pause to end. The press's answer (answerCallbackQuery: no message in the chat, and the
    user's spinner waits on it) is not held."""
    _, message = await notified(served, "Pressed under a 429")
    pause_s = 8.0
    paused_at_ms = time.time() * 1000
    await Governor(served.redis).pause(bot_id(served.token), message.chat_id, pause_s)
    answer = await press(served, message, data_of(message, buttons.READ))
    assert answer["text"] == "已标为已读"
    assert await served.redis.pttl(keys.governor_pause(bot_id(served.token),
                                                       message.chat_id)) > 0  # answered
    await edited(served, message, ["摘要", "✓ 已读", "归档", "阅读全文"])
    [edit_ms] = (await served.emulator.api_calls(served.token, "editMessageReplyMarkup")).times_ms
    assert edit_ms >= paused_at_ms + pause_s * 1000


async def test_a_429_answered_to_a_keyboard_edit_pauses_the_chats_lane(
    served: ServedApp,
) -> None:
    """Catches (issue #38) a keyboard edit whose 429 was only logged: the chat's lane must
    pause for `retry_after` on every instance, as after a message's 429, so the next message
    to the chat waits instead of meeting Telegram's flood wait."""
    _, message = await notified(served, "Edit meets a 429")
    await served.emulator.fail(token=served.token, method="editMessageReplyMarkup",
                               error_code=429, retry_after=5, times=1)
    await press(served, message, data_of(message, buttons.READ))
    pause = keys.governor_pause(bot_id(served.token), message.chat_id)

    async def paused() -> bool:
        return bool(await served.redis.exists(pause))
    await eventually(paused, "the chat's lane paused by the edit's 429", WAIT_S)
