"""What the notification buttons did (issue #16): one key per (action, mail), so a button
pressed twice does its work once (`messageweave.pipeline.buttons`). Keys: the mail's account's
(`AccountKeys.button_action`, `button_part`): two accounts' mailboxes may give equal ids.

A press first claims the key for its stream entry (`claim`); the entry's retries, on any
consumer, find their own claim and go on. The work done, the key becomes `done`
(`finish`); a failed attempt gives its claim back (`release`) so the retry or the next press
can do the work.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from messageweave.store import keys
from messageweave.store.keys import AccountKeys
from messageweave.store.redis import Redis, text_of
from messageweave.store.scripts import Script

DONE = "done"
Claim = Literal["claimed", "done", "busy"]

# KEYS: action (the action's key)   ARGV: owner (the claiming entry id), ttl (the claim's)
# → "claimed" (free, or already this entry's), "done", or "busy" (another press works on it).
CLAIM = Script("""
local held = redis.call('GET', KEYS[1])
if not held or held == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', tonumber(ARGV[2]))
  return 'claimed'
end
if held == 'done' then return 'done' end
return 'busy'
""", keys=("action",), args=("owner", "ttl"))

# KEYS: action (the action's key)   ARGV: owner (the entry id whose claim to give back) → 1
RELEASE = Script("""
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
""", keys=("action",), args=("owner",))


def _key(names: AccountKeys, action: str, email_id: str, part: str | None) -> str:
    return names.button_action(action, email_id) if part is None else names.button_part(
        email_id, part)


async def claim(redis: Redis, names: AccountKeys, action: str, email_id: str, owner: str, *,
                part: str | None = None) -> Claim:
    """Take the (action, mail) — or with `part`, the attachment (mail, part) — for the
    stream entry `owner`, unless it is done or taken."""
    answer = text_of(await CLAIM(redis, keys={"action": _key(names, action, email_id, part)},
                                 args={"owner": owner, "ttl": keys.BUTTON_CLAIM_TTL_S}))
    if answer == "done":
        return "done"
    return "claimed" if answer == "claimed" else "busy"


async def finish(redis: Redis, names: AccountKeys, action: str, email_id: str, *,
                 part: str | None = None) -> None:
    await redis.set(_key(names, action, email_id, part), DONE, ex=keys.BUTTON_DONE_TTL_S)


async def release(redis: Redis, names: AccountKeys, action: str, email_id: str, owner: str, *,
                  part: str | None = None) -> None:
    await RELEASE(redis, keys={"action": _key(names, action, email_id, part)},
                  args={"owner": owner})


async def done_actions(redis: Redis, names: AccountKeys, actions: Iterable[str],
                       email_id: str) -> frozenset[str]:
    """Which of `actions` are done for the mail (one MGET)."""
    wanted = list(actions)
    values = await redis.mget([names.button_action(a, email_id) for a in wanted])
    return frozenset(a for a, v in zip(wanted, values, strict=True) if text_of(v) == DONE)
