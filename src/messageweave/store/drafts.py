"""The drafts made from the chat (issue #25, `messageweave.pipeline.reply`). Keys: the chat's
account's (`AccountKeys.reply_draft`, `reply_entry`, `reply_drafts`; issue #35): a draft id is
an id of that account's mailbox, which another account's may give too.

Nothing here holds the owner's words or the mail's: only ids, the chat, the identity, times
and what became of the draft. The draft itself (the text) lives in the mailbox's Drafts.
The Send and Cancel buttons claim `a:{<id>}:button:d:{draft_id}` (`store.callbacks`) for the work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from messageweave.store import keys
from messageweave.store.keys import AccountKeys
from messageweave.store.redis import Redis, text_of

DraftEnd = Literal["sent", "cancelled", "expired"]
_ENDS: tuple[DraftEnd, ...] = ("sent", "cancelled", "expired")


@dataclass(frozen=True)
class DraftRecord:
    chat_id: int
    identity_id: str
    created_at: float
    outcome: DraftEnd | None = None  # None while it is a draft
    at: str | None = None  # when it was sent (the submission's sendAt), cancelled or expired


async def remember(redis: Redis, names: AccountKeys, draft_id: str, *, entry_id: str, chat_id: int,
                   identity_id: str, now: float) -> None:
    """The draft `entry_id` made, in one transaction: its record, its place in the expiry
    set, and the entry's note of it (so a retried entry does not make a second draft)."""
    async with redis.pipeline(transaction=True) as pipe:
        if entry_id:  # none when the conversation is driven without a stream (tests)
            pipe.set(names.reply_entry(entry_id), draft_id, ex=keys.REPLY_ENTRY_TTL_S)
        pipe.hset(names.reply_draft(draft_id), mapping={
            "chat_id": chat_id, "identity_id": identity_id, "created_at": now})
        pipe.expire(names.reply_draft(draft_id), keys.REPLY_DRAFT_TTL_S)
        pipe.zadd(names.reply_drafts, {draft_id: now})
        await pipe.execute()


async def made_by(redis: Redis, names: AccountKeys, entry_id: str) -> str | None:
    """The draft the stream entry made already (a retry), if any."""
    return text_of(await redis.get(names.reply_entry(entry_id)))


async def record(redis: Redis, names: AccountKeys, draft_id: str) -> DraftRecord | None:
    raw = {text_of(k): text_of(v) for k, v in (await redis.hgetall(
        names.reply_draft(draft_id))).items()}
    try:
        chat_id, created = int(raw["chat_id"] or ""), float(raw["created_at"] or "")
    except (KeyError, ValueError):
        return None
    outcome = next((o for o in _ENDS if o == raw.get("outcome")), None)
    return DraftRecord(chat_id, raw.get("identity_id") or "", created, outcome, raw.get("at"))


async def settle(redis: Redis, names: AccountKeys, draft_id: str, outcome: DraftEnd,
                 at: str) -> None:
    """What became of the draft: it leaves the expiry set, the record says it."""
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hset(names.reply_draft(draft_id), mapping={"outcome": outcome, "at": at})
        pipe.zrem(names.reply_drafts, draft_id)
        await pipe.execute()


async def older_than(redis: Redis, names: AccountKeys, moment: float,
                     limit: int) -> list[tuple[str, float]]:
    """The drafts made before `moment` (Unix seconds), oldest first, with their times."""
    found = await redis.zrangebyscore(names.reply_drafts, "-inf", moment, start=0, num=limit,
                                      withscores=True)
    return [(str(text_of(pair[0])), float(pair[1])) for pair in found
            if isinstance(pair, tuple | list)]


async def take(redis: Redis, names: AccountKeys, draft_id: str) -> bool:
    """Take an expired draft out of the set; True for the one instance that did."""
    return bool(await redis.zrem(names.reply_drafts, draft_id))


async def put_back(redis: Redis, names: AccountKeys, draft_id: str, created_at: float) -> None:
    """Give a draft the expiry could not destroy (the mailbox unreachable) back to the set."""
    await redis.zadd(names.reply_drafts, {draft_id: created_at})
