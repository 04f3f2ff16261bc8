"""The cluster-wide Telegram rate governor (docs/reference.md §1.3), a GCRA in one Lua script.

Lanes: the bot (≤30 msg/s), each private chat (≤1 msg/s), each group chat (≤20 msg/min;
Telegram group ids are negative). Every instance asks the same Redis keys, so the limits hold
for the whole cluster. A 429 pauses the chat's lane for `retry_after` seconds everywhere.

The limits can be changed (e.g. lifted for the benchmark) in the hash `governor:limits`
(`bot_per_s`, `chat_per_s`, `group_per_min`; 0 = unlimited); absent fields use Telegram's.

The worker charges the lanes right before the ledger's fence (`Ledger.gate`: `ACQUIRE`, then
`MARK`); `Governor.acquire` is the same check on its own, and `ChatLanes.call` runs a Telegram
call outside the fence behind it (a button press's keyboard edit, an attachment upload; issue
#38). Every lane key carries the `{gov}` hash tag, so `ACQUIRE` runs in one cluster slot (issue
#35).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from messageweave.chat.telegram import FailureClass, TelegramSendError
from messageweave.store import keys
from messageweave.store.redis import Redis
from messageweave.store.scripts import Script

MAX_WAIT_S = 5.0
T = TypeVar("T")

# The GCRA as a Lua function. A script using it must call `redis.replicate_commands()` first (it
# reads TIME before writing).
# gcra(limits, bot lane, chat lane, chat pause, is_group '0'/'1') → 0 when a send may go now
# (both lanes charged), else the milliseconds to wait.
GCRA = """
local function gcra(limits_key, bot_key, chat_key, pause_key, is_group)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local pause = redis.call('PTTL', pause_key)
  if pause > 0 then return pause end
  local l = redis.call('HMGET', limits_key, 'bot_per_s', 'chat_per_s', 'group_per_min')
  local bot = tonumber(l[1] or '30')
  local interval_bot = 0
  if bot > 0 then interval_bot = 1000 / bot end
  local interval_chat = 0
  if is_group == '1' then
    local g = tonumber(l[3] or '20')
    if g > 0 then interval_chat = 60000 / g end
  else
    local c = tonumber(l[2] or '1')
    if c > 0 then interval_chat = 1000 / c end
  end
  local tat_bot = tonumber(redis.call('GET', bot_key) or '0')
  local tat_chat = tonumber(redis.call('GET', chat_key) or '0')
  local wait = 0
  if interval_bot > 0 and tat_bot > now then wait = tat_bot - now end
  if interval_chat > 0 and tat_chat > now and tat_chat - now > wait then wait = tat_chat - now end
  if wait > 0 then return math.ceil(wait) end
  if interval_bot > 0 then
    local step = math.ceil(interval_bot)
    redis.call('SET', bot_key, string.format('%.0f', math.max(tat_bot, now) + step), 'PX',
      string.format('%d', step + 1000))
  end
  if interval_chat > 0 then
    local step = math.ceil(interval_chat)
    redis.call('SET', chat_key, string.format('%.0f', math.max(tat_chat, now) + step), 'PX',
      string.format('%d', step + 1000))
  end
  return 0
end
"""

# The names of the lanes' keys, in `gcra`'s order.
LANE_KEYS = ("limits", "bot", "chat", "pause")
# KEYS: limits (governor:limits), bot (the bot's lane), chat (the chat's lane), pause (the
#       chat's pause)
# ARGV: is_group (0/1)
# → 0 when a send may go now (both lanes charged), else the milliseconds to wait.
ACQUIRE = Script("redis.replicate_commands()\n" + GCRA + """
return gcra(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1])
""", keys=LANE_KEYS, args=("is_group",))


def bot_id(token: str) -> str:
    """The numeric part of a bot token (public); a digest when the token has none."""
    head, sep, _ = token.partition(":")
    if sep and head.isdigit():
        return head
    return hashlib.sha256(token.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Lanes:
    """What `gcra` needs for one send: its four keys (`KEYS` order) and `is_group`."""

    keys: tuple[str, str, str, str]
    is_group: str

    @property
    def named(self) -> dict[str, str]:
        """The keys by their names in the scripts (`LANE_KEYS`)."""
        return dict(zip(LANE_KEYS, self.keys, strict=True))


def lanes_of(bot: str, chat_id: int) -> Lanes:
    return Lanes((keys.GOVERNOR_LIMITS, keys.governor_bot(bot), keys.governor_chat(bot, chat_id),
                  keys.governor_pause(bot, chat_id)), "1" if chat_id < 0 else "0")


async def wait_before(wait_ms: int) -> None:
    """Sleep the governor's answer (at most `MAX_WAIT_S`: the lanes are asked again)."""
    await asyncio.sleep(min(wait_ms / 1000, MAX_WAIT_S))


class Governor:
    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def wait_ms(self, bot: str, chat_id: int) -> int:
        """Charge one send to the lanes, or say how long to wait before asking again."""
        lanes = lanes_of(bot, chat_id)
        return int(await ACQUIRE(self.redis, keys=lanes.named, args={"is_group": lanes.is_group}))

    async def acquire(self, bot: str, chat_id: int) -> None:
        """Wait until a send to `chat_id` is allowed on every instance's shared budget."""
        while True:
            wait = await self.wait_ms(bot, chat_id)
            if wait <= 0:
                return
            await wait_before(wait)

    async def pause(self, bot: str, chat_id: int, seconds: float) -> None:
        """A 429 for this chat: every instance holds the lane for `seconds`."""
        await self.redis.set(keys.governor_pause(bot, chat_id), "1",
                             px=max(1, int(seconds * 1000)))


@dataclass(frozen=True)
class ChatLanes:
    """One chat's lanes of one bot, for a Telegram call outside a delivery's fence: a button
    press's `editMessageReplyMarkup` and an attachment's upload count against the chat's rate
    like a reply's chunk (`Ledger.gate`), but are not chunks the ledger resumes (their once-ness
    is the press's claim, `store.callbacks`)."""

    redis: Redis
    bot: str
    chat_id: int

    async def call(self, send: Callable[[], Awaitable[T]]) -> T:
        """`send()` once the lanes allow it (a 429's pause included); a 429 it meets pauses the
        chat's lane on every instance, as a chunk's does (`Deliverer._telegram_failed`)."""
        governor = Governor(self.redis)
        await governor.acquire(self.bot, self.chat_id)
        try:
            return await send()
        except TelegramSendError as exc:
            if exc.failure_class is FailureClass.RATE_LIMIT and exc.retry_after:
                await governor.pause(self.bot, self.chat_id, exc.retry_after)
            raise
