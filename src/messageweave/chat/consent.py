"""Granting and revoking AI summary consent from the chat, with the exact confirmations."""

from __future__ import annotations

from messageweave.chat import texts
from messageweave.chat.intents import GrantConsent
from messageweave.config.features import BotLanguage
from messageweave.store import consent
from messageweave.store.keys import AccountKeys
from messageweave.store.redis import Redis


async def grant(
    redis: Redis, names: AccountKeys, chat_id: int, intent: GrantConsent, now: float,
    language: BotLanguage, timezone: str,
) -> str:
    """Grant, and the confirmation with the expiry in `timezone` (the configured one)."""
    expires_at = await consent.grant(redis, names, chat_id, intent.ttl_s, now)
    return texts.consent_granted(language, intent.label_key, expires_at, timezone)


async def revoke(redis: Redis, names: AccountKeys, chat_id: int, language: BotLanguage) -> str:
    await consent.revoke(redis, names, chat_id)
    return texts.table(language)["consent_revoked"]
