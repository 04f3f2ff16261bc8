"""The one-time code of "Find my chat" (issue #32): the admin page shows it, the owner sends
`/start <code>` to the bot, and only the chats that sent it are offered
(`pipeline.ingress.chats_of_updates`). Anyone can write to a bot with the owner's name; only
the owner can read the page. Key: `keys.DISCOVER_CODE`."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from messageweave.store import keys
from messageweave.store.redis import Redis, text_of

CODE_BYTES = 5  # 10 hex characters: a stranger's guesses within the TTL cannot come near


@dataclass(frozen=True)
class DiscoverCode:
    code: str
    expires_in_s: int


async def current_code(redis: Redis) -> DiscoverCode:
    """The code in force, made now (EX `DISCOVER_CODE_TTL_S`) when there is none."""
    for _ in range(3):  # the code may expire between the two reads
        await redis.set(keys.DISCOVER_CODE, secrets.token_hex(CODE_BYTES), nx=True,
                        ex=keys.DISCOVER_CODE_TTL_S)
        code = text_of(await redis.get(keys.DISCOVER_CODE))
        ttl = await redis.ttl(keys.DISCOVER_CODE)
        if code and ttl > 0:
            return DiscoverCode(code, int(ttl))
    raise RuntimeError("the discover code keeps expiring")


async def spend_code(redis: Redis, code: str) -> None:
    """The code found its chat: a later "Find my chat" needs a new one."""
    if text_of(await redis.get(keys.DISCOVER_CODE)) == code:
        await redis.delete(keys.DISCOVER_CODE)
