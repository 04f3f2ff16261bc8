"""The whole service on an IMAP mailbox (issue #33): a mail delivered to the real Dovecot (or
Cyrus's imapd) reaches the chat as a notification with its buttons, through the IDLE holder,
the catch-up, the delivery stream and the IMAP mail source; Mark read pressed under it sets
`\\Seen` on the server. The app runs in process with its lifespan (worker, scheduler, IDLE
holder) against the Bot API emulator."""

from __future__ import annotations

import httpx
import redis.asyncio as aioredis

from messageweave.config.model import parse_wire
from messageweave.pipeline import buttons
from tests.helpers import WAIT_S, configure, eventually, keyboard
from tests.integration.imap.conftest import ImapPeer
from tests.integration.imap.test_idle import _inbox_id, _raw, _watching, imap_wire
from tests.peers.telegram import SentMessage, TelegramEmulator


async def test_a_delivered_mail_is_notified_and_mark_read_sets_seen(
    imap_peer: ImapPeer, client: httpx.AsyncClient, redis_client: aioredis.Redis,
    telegram_emulator: TelegramEmulator,
) -> None:
    """Catches an IMAP mail enqueued but never notified (the worker reading it from a JMAP
    client, or the IMAP source not built for an IMAP wire), a notification without its signed
    buttons (an id that does not fit them), and Mark read acting on no mail or another one."""
    wire = imap_wire(imap_peer, telegram_emulator)
    cfg = parse_wire(wire)
    admin = await configure(client, wire)
    await _watching(client, redis_client, admin)
    subject = f"Lunch on the IMAP side ({imap_peer.name})"
    imap_peer.deliver(_raw(subject))
    email_id = await _inbox_id(imap_peer)
    found: list[SentMessage] = []

    async def notified() -> bool:
        found[:] = [m for m in await telegram_emulator.sent_messages(str(wire["bot_token"]))
                    if subject in m.text]
        return bool(found)

    await eventually(notified, "the notification of the delivered mail", WAIT_S)
    [message] = found
    assert message.chat_id == cfg.telegram_chat_id
    pressed = {buttons.verify(cfg, data) for _, data in keyboard(message)}
    assert buttons.Button(buttons.READ, email_id) in pressed

    read = buttons.callback_data(cfg, buttons.READ, email_id)
    update = {"update_id": 910_001, "callback_query": {
        "id": "imap-press-1", "from": {"id": cfg.telegram_chat_id, "is_bot": False,
                                       "first_name": "Ada"},
        "chat_instance": "ci", "data": read,
        "message": {"message_id": message.message_id, "date": message.date,
                    "chat": {"id": cfg.telegram_chat_id, "type": "private"}}}}
    secret = {"X-Telegram-Bot-Api-Secret-Token": cfg.telegram_webhook_secret}
    assert (await client.post("/webhook/tg", headers=secret, json=update)).status_code == 204

    async def seen() -> bool:
        async with imap_peer.client() as c:
            await c.select("INBOX", readonly=True)
            uid = int(email_id.rsplit("_", 1)[1], 36)
            flags = (await c.uid_fetch([uid], ["UID", "FLAGS"]))[uid].flags or ()
        return "\\Seen" in flags

    await eventually(seen, "\\Seen on the mail after Mark read", WAIT_S)
