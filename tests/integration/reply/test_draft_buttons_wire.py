"""A reply draft's Send and Cancel buttons keep their `callback_data` (issue #38 item 4): the
draft got a button type of its own (`buttons.DraftButton`) and its lifecycle a module of its
own (`pipeline.draft`), but the buttons already in users' chats were made by the old code and
must still be answered. The old wire format is spelled out here, not taken from the code under
test (reference §7.6, §7.13): the action letter (`d` Send, `x` Cancel), then 16 characters of
base64url over the first 96 bits of HMAC-SHA256 of `{action}:{draft_id}`, keyed with
HMAC-SHA256(telegram_webhook_secret, "messageweave/buttons/v1"), then the draft's id."""

from __future__ import annotations

import base64
import hashlib
import hmac

from messageweave.config.model import parse_wire
from messageweave.mail.jmap import JmapClient
from messageweave.store import drafts, keys
from tests.helpers import keyboard, press_in
from tests.integration.reply.test_reply import (
    after,
    draft_id_of,
    draft_preview,
    notified,
    received,
    where,
)
from tests.peers.smtp import SmtpSink
from tests.served import ServedApp


def old_draft_button(secret: str, action: str, draft_id: str) -> str:
    """The `callback_data` the code before issue #38 put under a draft's preview."""
    key = hmac.new(secret.encode(), b"messageweave/buttons/v1", hashlib.sha256).digest()
    mac = hmac.new(key, f"{action}:{draft_id}".encode(), hashlib.sha256).digest()[:12]
    return f"{action}{base64.urlsafe_b64encode(mac).decode()}{draft_id}"


async def test_a_send_button_made_by_the_old_code_still_sends_the_draft(
    served: ServedApp, smtp_sink: SmtpSink, mailbox: JmapClient,
) -> None:
    """Catches the draft's button type (`DraftButton`) changing the Send/Cancel
    `callback_data`: a preview's buttons that differ from the old format, or a Send already in
    a user's chat (the old format) answered "no longer valid" instead of sending the reply."""
    email_id, _, notification = await notified(served, "Old button")
    await served.say(f"/reply {email_id} Sent by an old button.")
    preview = await draft_preview(served, notification)
    draft_id = await draft_id_of(served, preview)
    secret = parse_wire(served.wire).telegram_webhook_secret
    send, cancel = old_draft_button(secret, "d", draft_id), old_draft_button(secret, "x", draft_id)
    assert keyboard(preview) == [("发送", send), ("取消", cancel)]

    answer = await press_in(served, served.chat, preview.message_id, send)
    assert answer["text"] == "已发送"
    [sent] = await received(smtp_sink, "Old button")
    assert "Sent by an old button." in sent.body_text()
    [confirmation] = await after(served, preview.message_id)
    assert confirmation.text.startswith("已发送（")
    assert await where(mailbox, draft_id) == {"sent"}
    record = await drafts.record(served.redis, keys.DEFAULT, draft_id)
    assert record is not None and record.outcome == "sent"


async def test_a_cancel_button_made_by_the_old_code_still_deletes_the_draft(
    served: ServedApp, mailbox: JmapClient,
) -> None:
    """Catches an old Cancel button (the format before issue #38) in a user's chat answered
    "no longer valid" and leaving the draft in Drafts, to be sent by a later press."""
    email_id, _, notification = await notified(served, "Old cancel")
    await served.say(f"/reply {email_id} Cancelled by an old button.")
    preview = await draft_preview(served, notification)
    draft_id = await draft_id_of(served, preview)
    cancel = old_draft_button(parse_wire(served.wire).telegram_webhook_secret, "x", draft_id)

    answer = await press_in(served, served.chat, preview.message_id, cancel)
    assert answer["text"] == "草稿已删除"
    assert await where(mailbox, draft_id) is None
    record = await drafts.record(served.redis, keys.DEFAULT, draft_id)
    assert record is not None and record.outcome == "cancelled"
