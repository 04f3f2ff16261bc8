"""Send and Cancel of a reply draft claimed once, whatever arrives at the same moment or from
where (issue #32, finding 10): the double-press test in test_reply.py presses one after the
other, so the outcome record stops the second press and the claim itself is never exercised.
Real Cyrus (relaying to the SMTP sink) and the Bot API emulator."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from messageweave.mail.jmap import JmapClient
from messageweave.pipeline import buttons
from messageweave.store import drafts, keys
from messageweave.store.keys import DEFAULT_ACCOUNT
from tests.helpers import eventually, keyboard
from tests.integration.reply.test_reply import (
    draft_id_of,
    draft_preview,
    notified,
    received,
    to_bob,
    where,
)
from tests.peers.smtp import SmtpSink
from tests.peers.telegram import SentMessage
from tests.served import ServedApp

SETTLE_S = 0.5  # what the sink could still receive from Cyrus's relay after the presses


async def _draft(served: ServedApp, subject: str) -> tuple[SentMessage, dict[str, str]]:
    """A draft reply to a new mail: its preview and its buttons' data by label."""
    email_id, _, notification = await notified(served, subject)
    await served.say(f"/reply {email_id} Exactly once.")
    preview = await draft_preview(served, notification)
    return preview, dict(keyboard(preview))


async def _at_once(served: ServedApp, preview: SentMessage, monkeypatch: pytest.MonkeyPatch,
                   *data: str) -> None:
    """The worker's step for each press, both in flight together: what two instances (or two
    lanes) do with presses that arrive in the same moment. Run in the served app's own
    services, so the claim, the draft record and the mailbox are the real ones.

    The moment is made, not hoped for: a press that has read the draft's state in the
    mailbox (`draft_state`, which only a press holding the claim calls) waits until the other
    press has read it too, or has finished. Without the wait the overlap depends on the
    machine's timing, and a claim that always grants slipped through one run in two."""
    account = served.services.accounts.get(DEFAULT_ACCOUNT)
    assert account is not None
    svc, cfg = served.services.for_account(account), account.config
    arrived, go = [0], asyncio.Event()
    real = JmapClient.draft_state

    async def meet(self: JmapClient, email_id: str) -> Any:
        state = await real(self, email_id)
        arrived[0] += 1
        if arrived[0] == len(data):
            go.set()
        await go.wait()
        return state

    async def work(press: buttons.Press) -> None:
        try:
            await buttons.handle_press(press, svc, cfg)
        finally:
            go.set()  # the other press has nobody left to wait for

    monkeypatch.setattr(JmapClient, "draft_state", meet)
    presses = [buttons.Press(f"{n + 1}-0", f"at-once-{n}", served.chat, d, preview.message_id,
                             user_id=served.chat) for n, d in enumerate(data)]
    await asyncio.gather(*(work(p) for p in presses))


async def test_two_send_presses_at_the_same_moment_send_one_mail(
    served: ServedApp, smtp_sink: SmtpSink, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches the draft's once-claim (`button:d:`) replaced by one that always grants: two
    Send presses worked at the same moment both find the draft unsent and both submit it."""
    preview, data = await _draft(served, "Same moment")
    await _at_once(served, preview, monkeypatch, data["发送"], data["发送"])
    await received(smtp_sink, "Same moment")
    await asyncio.sleep(SETTLE_S)
    assert len(smtp_sink.matching(to_bob("Same moment"))) == 1
    record = await drafts.record(served.redis, keys.DEFAULT, await draft_id_of(served, preview))
    assert record is not None and record.outcome == "sent"


async def test_send_and_cancel_at_the_same_moment_do_one_of_them(
    served: ServedApp, smtp_sink: SmtpSink, mailbox: JmapClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches Send and Cancel both acting on one draft when pressed together: a mail sent
    while the record says cancelled, or a sent mail destroyed by the Cancel. Exactly one of
    them happens, and the record says which. (A guard: with a claim that always grants, Cyrus
    itself refuses the submission of a draft the Cancel destroyed, so the double-Send test
    above is the one that catches that mutant.)"""
    preview, data = await _draft(served, "Send or cancel")
    draft_id = await draft_id_of(served, preview)
    await _at_once(served, preview, monkeypatch, data["发送"], data["取消"])
    record = await drafts.record(served.redis, keys.DEFAULT, draft_id)
    assert record is not None and record.outcome in ("sent", "cancelled")
    await asyncio.sleep(SETTLE_S)
    mails = smtp_sink.matching(to_bob("Send or cancel"))
    if record.outcome == "sent":
        assert len(mails) == 1
        assert await where(mailbox, draft_id) == {"sent"}
    else:
        assert mails == []
        assert await where(mailbox, draft_id) is None


async def test_send_pressed_in_another_allowlisted_chat_is_refused(
    served: ServedApp, smtp_sink: SmtpSink,
) -> None:
    """Catches Send accepted from a chat other than the one that made the draft (the
    `record.chat_id != press.chat_id` check removed; the stranger test is stopped by the
    allowlist first). The owner is in both chats: a family group on the allowlist, where
    the preview's Send data is pressed under one of the bot's messages there."""
    group = -1_000_000_000_000 - served.chat
    await served.configure(chat_allowlist=[served.chat, group])
    preview, data = await _draft(served, "Made in private")
    draft_id = await draft_id_of(served, preview)
    said = await served.emulator.send_user_message(served.token, group, "/help",
                                                   from_id=served.chat, chat_type="group")
    assert said.status == 204
    [in_group, *_] = await served.emulator.wait_for_messages(served.token, group)
    pressed = await served.emulator.press_button(served.token, group, in_group.message_id,
                                                 data["发送"], from_id=served.chat)
    assert pressed.status == 204
    answers: list[dict[str, Any]] = []

    async def answered() -> bool:
        answers[:] = [a for a in await served.emulator.callback_answers(served.token)
                      if a["callback_query_id"] == pressed.callback_id]
        return bool(answers)
    await eventually(answered, "the answer to the press in the group")
    [answer] = answers
    assert answer["text"] == "这份草稿已不在了（已发送、已取消或已过期）"
    record = await drafts.record(served.redis, keys.DEFAULT, draft_id)
    assert record is not None and record.outcome is None
    await asyncio.sleep(SETTLE_S)
    assert smtp_sink.matching(to_bob("Made in private")) == []
