"""What the bot answers to a message from its owner.

The worker calls `reply_to_update` for each `stalwart:telegram` entry and sends the replies
through the same sender, rate governor and ledger as notifications.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from messageweave.chat import replies
from messageweave.config.model import BusinessConfig, OutboundConfig
from messageweave.mail.jmap import JmapClient
from messageweave.store.redis import Redis


@dataclass(frozen=True)
class IncomingMessage:
    """The only parts of a Telegram update the conversation needs."""

    chat_id: int
    text: str


@dataclass(frozen=True)
class Reply:
    chat_id: int
    text: str


@dataclass
class ConversationContext:
    redis: Redis
    config: BusinessConfig
    outbound: OutboundConfig
    # Connects on demand; raises messageweave.mail.jmap.JmapError when the mailbox is unreachable.
    jmap: Callable[[], Awaitable[JmapClient]]
    now: Callable[[], float] = field(default=time.time)


async def reply_to_update(message: IncomingMessage, ctx: ConversationContext) -> list[Reply]:
    """The replies to one message; an empty list when the bot should stay silent."""
    text = message.text.strip().lower()
    if text in ("/help", "help"):
        return [Reply(message.chat_id, replies.HELP)]
    return []
