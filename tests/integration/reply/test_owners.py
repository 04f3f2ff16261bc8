"""Who may read and send (issue #32, finding 7), end to end: a group used for notifications,
its owner and another member played by the Bot API emulator (`from` as Telegram sends it)
through our HTTPS webhook, the draft in Cyrus and what the SMTP sink received. The private
chat with no owner listed is the rest of this directory's and `tests/integration/telegram/
test_read.py`'s setup: it works as before."""

from __future__ import annotations

import asyncio
from typing import Any

from messageweave.config.model import parse_wire
from messageweave.pipeline import buttons
from tests.helpers import WAIT_S, eventually, keyboard, press
from tests.peers.smtp import SmtpSink
from tests.peers.telegram import SentMessage
from tests.served import ServedApp

GROUP = -1_009_876_543_210
OWNER, MEMBER = 5_550_001, 5_550_002
REFUSAL = "只有邮箱的主人可以这样做"


async def _last_id(served: ServedApp) -> int:
    sent = await served.emulator.sent_messages(served.token, GROUP)
    return sent[-1].message_id if sent else 0


async def _next(served: ServedApp, after: int) -> SentMessage:
    """The first message the bot sent to the group after `after`."""
    later: list[SentMessage] = []

    async def sent() -> bool:
        later[:] = [m for m in await served.emulator.sent_messages(served.token, GROUP)
                    if m.message_id > after]
        return bool(later)

    await eventually(sent, "the bot's answer in the group")
    return later[0]


async def _says(served: ServedApp, user: int, text: str) -> SentMessage:
    """`user` writes `text` in the group; the bot's answer."""
    before = await _last_id(served)
    delivery = await served.emulator.send_user_message(
        served.token, GROUP, text, chat_type="group", from_id=user)
    assert delivery.status == 204, delivery
    return await _next(served, before)


async def _presses(served: ServedApp, user: int, message: SentMessage,
                   data: str) -> dict[str, Any]:
    """`user` presses the button `data` under `message`; the bot's answer to the press."""
    return await press(served, message, data, from_id=user)


async def test_in_a_group_only_the_owner_may_read_search_reply_and_send(
    served: ServedApp, smtp_sink: SmtpSink,
) -> None:
    """Catches any member of an allowlisted group reading every mail and sending as the owner
    (issue #32, finding 7): `/read`, `/search`, `/reply`, the Read button and a draft's Send
    checked only the chat. A member gets the one short refusal and nothing is read or sent; the
    owner, in the same group, reads and sends."""
    await served.configure(telegram_chat_id=GROUP, chat_allowlist=[GROUP],
                           owner_user_ids=[OWNER])
    cfg = parse_wire({**served.wire, "telegram_chat_id": GROUP, "chat_allowlist": [GROUP]})
    email_id = served.append("Owners only 7 June", sender="Bob Example <bob@example.org>",
                             to="Alice <alice@localhost>")
    before = await _last_id(served)
    await served.enqueue_mail(email_id)
    notification = await _next(served, before)
    [read] = [d for _, d in keyboard(notification)
              if (b := buttons.verify(cfg, d)) is not None and b.action == buttons.READ_MAIL]

    for text in (f"/read {email_id}", "/search Owners", f"/reply {email_id} hi from a member",
                 f"/summary {email_id}"):
        assert (await _says(served, MEMBER, text)).text == REFUSAL, text
    assert (await _presses(served, MEMBER, notification, read))["text"] == REFUSAL

    preview = await _says(served, OWNER, f"/reply {email_id} Yes, from the owner")
    [send] = [d for t, d in keyboard(preview) if t == "发送"]
    assert (await _presses(served, MEMBER, preview, send))["text"] == REFUSAL
    sending = await _last_id(served)
    assert (await _presses(served, OWNER, preview, send))["text"] == "已发送"
    # The press is answered before the chat's "已发送（time）" message is posted: wait for it,
    # or the owner's /read below would take it for its answer (a race seen under load).
    assert (await _next(served, sending)).text.startswith("已发送（")
    sent = await asyncio.to_thread(
        smtp_sink.wait_for, lambda r: r.message["Subject"] == "Re: Owners only 7 June", 1,
        WAIT_S)
    assert [r.rcpt_tos for r in sent] == [("bob@example.org",)]

    owner_read = await _says(served, OWNER, f"/read {email_id}")
    assert "主题：Owners only 7 June" in owner_read.text
    assert (await _presses(served, OWNER, notification, read))["text"] is None
    await asyncio.sleep(0.5)  # and the member's Send sent nothing more
    assert len(smtp_sink.matching(lambda r: r.message["Subject"] == "Re: Owners only 7 June")) == 1
