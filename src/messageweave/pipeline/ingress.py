"""The chat's door to the delivery queue: an update parsed and enqueued (ingress), and the
chats refused. The DLQ's listing and replay are `pipeline.dlq`; the queue's counts
`store.opstats.delivery_status`."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from messageweave.config.model import BusinessConfig
from messageweave.jsonio import is_int
from messageweave.store import refused
from messageweave.store.redis import Redis
from messageweave.store.refused import RefusedChat
from messageweave.store.streams import SwitchedOff as SwitchedOff  # for the webhook to catch
from messageweave.store.streams import UpdateIngress


class UpdateInvalid(ValueError):
    """The body is not a Telegram Update."""


class ChatNotAllowed(Exception):
    """The update comes from a chat outside the allowlist: its id and a short name (the chat's
    title, else the sender's name), for the operator to recognize it (`remember_refused`); and
    the update's id, so a redelivered update is counted once."""

    def __init__(self, chat_id: int, name: str, update_id: int) -> None:
        super().__init__(chat_id)
        self.chat_id = chat_id
        self.name = name
        self.update_id = update_id


@dataclass(frozen=True)
class Update:
    update_id: int
    fields: dict[str, str]


def parse_update(body: object, cfg: BusinessConfig,
                 accounts: Collection[int] | None = None) -> Update:
    """The chats allowed are `cfg`'s allowlist, or with several accounts `accounts` (every
    account's: `services.AccountRegistry.allowlist`); empty, every chat (the rule of a
    configuration older than the allowlist). Keep only what the worker needs: update_id, and
    the message's chat id, sender's user id and text, or of a button press (`callback_query`)
    its id, data, chat, presser's user id, message and topic. The user id decides who may
    read and send (`pipeline.owners`)."""
    if not isinstance(body, dict) or not is_int(body.get("update_id")):
        raise UpdateInvalid
    update_id = int(body["update_id"])
    if update_id < 0:
        raise UpdateInvalid
    allowlist = cfg.chat_allowlist if accounts is None else accounts
    fields = {"update_id": str(update_id)}
    if body.get("message") is None and body.get("callback_query") is not None:
        return Update(update_id,
                      fields | _callback_fields(body["callback_query"], allowlist, update_id))
    message = body.get("message")
    if message is None:
        return Update(update_id, fields)
    chat = message.get("chat") if isinstance(message, dict) else None
    if not isinstance(chat, dict) or not is_int(chat.get("id")):
        raise UpdateInvalid
    chat_id = int(chat["id"])
    if allowlist and chat_id not in allowlist:
        raise ChatNotAllowed(chat_id, _chat_name(chat, message.get("from")), update_id)
    fields["chat_id"] = str(chat_id)
    fields |= _sender_field(message.get("from"))
    text = message.get("text")
    if isinstance(text, str):
        fields["text"] = text
    replied = _replied_data(message.get("reply_to_message"))
    if replied is not None:
        fields["reply_to_data"] = replied
    return Update(update_id, fields)


def _sender_field(sender: object) -> dict[str, str]:
    """`from_id`: the Telegram user id of who wrote or pressed (Bot API `from.id`), nothing
    else of them; {} when the update has none (a channel post)."""
    if isinstance(sender, dict) and is_int(sender.get("id")):
        return {"from_id": str(int(sender["id"]))}
    return {}


def _replied_data(replied: object) -> str | None:
    """A Telegram reply (issue #25): the `callback_data` of the first button under the
    replied-to message, which Telegram sends with it (`reply_markup`); whether we signed it,
    and for which mail, the worker checks (`buttons.replied_mail`)."""
    markup = replied.get("reply_markup") if isinstance(replied, dict) else None
    rows = markup.get("inline_keyboard") if isinstance(markup, dict) else None
    first = rows[0] if isinstance(rows, list) and rows and isinstance(rows[0], list) else []
    data = first[0].get("callback_data") if first and isinstance(first[0], dict) else None
    return data[:64] if isinstance(data, str) else None


def _callback_fields(query: object, allowlist: Collection[int],
                     update_id: int) -> dict[str, str]:
    """A button press: the chat of the message under which it was pressed (else the user's
    private chat), checked against the allowlist like a message's. A press we cannot place in
    a chat, or whose `id` or `data` is not a string, is acknowledged and left alone ({})."""
    if not isinstance(query, dict):
        raise UpdateInvalid
    message, sender = query.get("message"), query.get("from")
    chat = message.get("chat") if isinstance(message, dict) else sender
    callback_id, data = query.get("id"), query.get("data")
    if (not isinstance(chat, dict) or not is_int(chat.get("id"))
            or not isinstance(callback_id, str) or not isinstance(data, str)):
        return {}
    chat_id = int(chat["id"])
    if allowlist and chat_id not in allowlist:
        raise ChatNotAllowed(chat_id, _chat_name(chat, sender), update_id)
    # Both are at most 64 characters from Telegram; longer ones are cut, never stored whole.
    fields = {"chat_id": str(chat_id), "callback_id": callback_id[:64], "callback_data": data[:64],
              **_sender_field(sender)}
    pressed = message if isinstance(message, dict) else {}
    if is_int(pressed.get("message_id")):
        fields["message_id"] = str(pressed["message_id"])
    if pressed.get("is_topic_message") is True and is_int(pressed.get("message_thread_id")):
        fields["thread_id"] = str(pressed["message_thread_id"])  # a forum topic: reply in it
    return fields


def _chat_name(chat: dict[str, Any], sender: object) -> str:
    """The group's title, else the person's first name and @username; never the message."""
    title = chat.get("title")
    if isinstance(title, str) and title.strip():
        return refused.short_name(title)
    person = sender if isinstance(sender, dict) else chat
    first, username = person.get("first_name"), person.get("username")
    parts = [first if isinstance(first, str) else "",
             f"(@{username})" if isinstance(username, str) and username else ""]
    return refused.short_name(" ".join(parts))


@dataclass(frozen=True)
class WroteChat:
    """A chat that sent "Find my chat"'s code, as `POST /api/telegram/discover-chats` lists it:
    its id, a short name (`_chat_name`), Telegram's chat type (None when unknown) and the user
    id of who sent the code (the owner to be)."""

    chat_id: int
    name: str
    type: str | None
    user_id: int

    def to_json(self) -> dict[str, Any]:
        return {"chat_id": self.chat_id, "name": self.name, "type": self.type,
                "user_id": self.user_id}


def start_code(text: object) -> str | None:
    """The argument of `/start <code>` (also `/start@bot <code>`, as a group sends it), which a
    `https://t.me/<bot>?start=<code>` link sends too; None for any other text."""
    if not isinstance(text, str):
        return None
    parts = text.split()
    if len(parts) != 2 or parts[0].split("@", 1)[0] != "/start":
        return None
    return parts[1]


def _sent_code(update: object, code: str) -> WroteChat | None:
    """The chat of a getUpdates update that is a message `/start <code>`, with its sender;
    None for anything else. A button press, an edit or a name cannot stand in for the code."""
    message = update.get("message") if isinstance(update, dict) else None
    if not isinstance(message, dict) or start_code(message.get("text")) != code:
        return None
    chat, sender = message.get("chat"), message.get("from")
    if (not isinstance(chat, dict) or not is_int(chat.get("id"))
            or not isinstance(sender, dict) or not is_int(sender.get("id"))):
        return None
    kind = chat.get("type")
    return WroteChat(int(chat["id"]), _chat_name(chat, sender),
                     kind if isinstance(kind, str) and kind.isidentifier() else None,
                     int(sender["id"]))


def chats_of_updates(updates: Iterable[object], code: str) -> list[WroteChat]:
    """The distinct chats of `updates` (getUpdates' answer, oldest first) in which someone sent
    `/start <code>`, the latest first. Anyone can write to the bot with the owner's name: only
    the code, which only the admin page shows, tells the owner's chat. Only ids, names and
    types: never a message's text."""
    found: dict[tuple[int, int], WroteChat] = {}
    for update in reversed(list(updates)):
        chat = _sent_code(update, code)
        if chat is not None and (chat.chat_id, chat.user_id) not in found:
            found[(chat.chat_id, chat.user_id)] = chat
    return list(found.values())


async def remember_refused(redis: Redis, refusal: ChatNotAllowed) -> None:
    """Note the refused chat for the admin page (`store.refused`): one Redis write."""
    await refused.record(redis, refusal.chat_id, refusal.name, refusal.update_id)


async def refused_chats(redis: Redis, allowlist: Iterable[int]) -> list[RefusedChat]:
    """The chats refused lately, newest first, without those allowlisted since."""
    allowed = set(allowlist)
    return [chat for chat in await refused.recent(redis) if chat.chat_id not in allowed]


async def enqueue_update_if_enabled(ingress: UpdateIngress, update: Update) -> bool:
    """Queue `update` when the service is switched on, in one Redis round trip shared with
    the other requests of the moment (False: Telegram redelivered an update already queued);
    else `SwitchedOff`, with nothing written."""
    return await ingress.enqueue_if_enabled(update.update_id, update.fields) is not None
