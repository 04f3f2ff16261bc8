"""The chats `/webhook/tg` refused lately (outside the allowlist), so the admin page can show the
operator the chat id they are looking for.

Anyone can write to a bot, so what is kept is bounded: at most `REFUSED_CHATS_MAX` chats (the
most recent), each forgotten `REFUSED_CHATS_TTL_S` after its last refusal, each with a name of at
most `NAME_MAX_CHARS` characters and never a message's text. Keys: `messageweave.store.keys`.
"""

from __future__ import annotations

import time
import unicodedata
from dataclasses import dataclass
from typing import Any

from messageweave.store import keys
from messageweave.store.redis import Redis, int_of, text_of
from messageweave.store.scripts import Script

NAME_MAX_CHARS = 64

# KEYS: chats (the sorted set), info (the hash)
# ARGV: chat_id, name ("" = keep stored), now (Unix s, fractional), max_chats, ttl, update_id
# → 1. One refusal: refresh the chat's last-seen time, count it unless it is the update counted
# last for this chat (a redelivery), then drop the chats not seen within the TTL and the oldest
# beyond the cap, hash fields included.
RECORD_REFUSAL = Script("""
local id, now, ttl = ARGV[1], tonumber(ARGV[3]), tonumber(ARGV[5])
redis.call('ZADD', KEYS[1], now, id)
if redis.call('HGET', KEYS[2], id .. ':update') ~= ARGV[6] then
  redis.call('HINCRBY', KEYS[2], id .. ':count', 1)
  redis.call('HSET', KEYS[2], id .. ':update', ARGV[6])
end
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[2], id .. ':name', ARGV[2])
end
local function drop(ids)
  for _, old in ipairs(ids) do
    redis.call('ZREM', KEYS[1], old)
    redis.call('HDEL', KEYS[2], old .. ':name', old .. ':count', old .. ':update')
  end
end
drop(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - ttl))
local excess = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[4])
if excess > 0 then
  drop(redis.call('ZRANGE', KEYS[1], 0, excess - 1))
end
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('EXPIRE', KEYS[2], ttl)
return 1
""", keys=("chats", "info"), args=("chat_id", "name", "now", "max_chats", "ttl", "update_id"))


@dataclass(frozen=True)
class RefusedChat:
    chat_id: int
    name: str
    last_seen: int  # Unix seconds
    count: int

    def to_json(self) -> dict[str, Any]:
        return {"chat_id": self.chat_id, "name": self.name, "last_seen": self.last_seen,
                "count": self.count}


_ZERO_WIDTH_JOINER = "\u200d"  # a format character that emoji sequences need


def _printable(char: str) -> str:
    category = unicodedata.category(char)
    if category in ("Cc", "Cs") or category[0] == "Z":
        return " "
    return "" if category == "Cf" and char != _ZERO_WIDTH_JOINER else char


def short_name(text: str) -> str:
    """`text` on one line, without control or bidi characters, cut to `NAME_MAX_CHARS`."""
    return " ".join("".join(map(_printable, text)).split())[:NAME_MAX_CHARS]


async def record(redis: Redis, chat_id: int, name: str, update_id: int,
                 now: float | None = None) -> None:
    """Count one refused update from `chat_id`, once per `update_id` (one script, one round
    trip)."""
    moment = time.time() if now is None else now
    await RECORD_REFUSAL(
        redis, keys={"chats": keys.REFUSED_CHATS, "info": keys.REFUSED_CHATS_INFO},
        args={"chat_id": str(chat_id), "name": short_name(name), "now": repr(moment),
              "max_chats": keys.REFUSED_CHATS_MAX, "ttl": keys.REFUSED_CHATS_TTL_S,
              "update_id": str(update_id)})


async def recent(redis: Redis, now: float | None = None) -> list[RefusedChat]:
    """The chats refused within the TTL, the most recently refused first."""
    moment = time.time() if now is None else now
    members: Any = await redis.zrevrangebyscore(
        keys.REFUSED_CHATS, "+inf", f"({moment - keys.REFUSED_CHATS_TTL_S!r}",
        start=0, num=keys.REFUSED_CHATS_MAX, withscores=True)
    seen = [(text_of(member) or "", int(score)) for member, score in members]
    if not seen:
        return []
    fields = [f"{member}:{part}" for member, _ in seen for part in ("name", "count")]
    values: list[Any] = await redis.hmget(keys.REFUSED_CHATS_INFO, fields)
    chats = []
    for index, (member, last_seen) in enumerate(seen):
        chat_id = int_of(member)
        if chat_id is not None:
            name, count = text_of(values[2 * index]), int_of(text_of(values[2 * index + 1]))
            chats.append(RefusedChat(chat_id, name or "", last_seen, count or 1))
    return chats
