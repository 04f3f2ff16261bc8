"""AI summary consent per chat, in the chat's account: `a:{<id>}:consent:ai:{chat_id}`
(`AccountKeys.consent_ai`) holds the absolute Unix expiry.

The key carries the matching EX, so it disappears when consent ends; it is never renewed by use.
"""

from __future__ import annotations

from messageweave.store.keys import AccountKeys
from messageweave.store.redis import Redis


async def grant(redis: Redis, names: AccountKeys, chat_id: int, ttl_s: int, now: float) -> int:
    """Store consent for `ttl_s` seconds from `now`; returns the expiry (Unix seconds)."""
    expires_at = int(now) + ttl_s
    await redis.set(names.consent_ai(chat_id), str(expires_at), ex=ttl_s)
    return expires_at


async def revoke(redis: Redis, names: AccountKeys, chat_id: int) -> None:
    await redis.delete(names.consent_ai(chat_id))


async def expires_at(redis: Redis, names: AccountKeys, chat_id: int) -> int | None:
    """The stored expiry, or None when there is no (readable) consent."""
    value = await redis.get(names.consent_ai(chat_id))
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


async def is_valid(redis: Redis, names: AccountKeys, chat_id: int, now: float) -> bool:
    """Consent counts only while its stored expiry is in the future."""
    expiry = await expires_at(redis, names, chat_id)
    return expiry is not None and expiry > now
