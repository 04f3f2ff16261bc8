"""Pointing the bot at this service: setWebhook with our secret, then the command menu."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from messageweave.chat.telegram import TelegramClient

ALLOWED_UPDATES = ("message",)
COMMANDS: tuple[tuple[str, str], ...] = (
    ("help", "使用说明"),
    ("search", "搜索邮件：/search <关键词>"),
    ("summary", "邮件摘要：/summary <email_id>"),
    ("ai", "AI 摘要授权：/ai on 或 /ai off"),
)


def webhook_url_of(body: dict[str, Any]) -> str | None:
    """`callback_url` if it is an https URL with a host, no credentials and no fragment."""
    url = body.get("callback_url")
    if not isinstance(url, str) or url != url.strip() or not url:
        return None
    try:
        parts = urlsplit(url)
        valid = (parts.scheme == "https" and bool(parts.hostname) and not parts.fragment
                 and parts.username is None and parts.password is None)
        parts.port  # noqa: B018 - raises ValueError for a malformed port
    except ValueError:
        return None
    return url if valid else None


async def register_webhook(telegram: TelegramClient, url: str, secret: str) -> str:
    """setWebhook + setMyCommands; returns the URL Telegram now has (getWebhookInfo).

    Raises `TelegramSendError` when Telegram refuses any of the three calls.
    """
    await telegram.set_webhook(url, secret_token=secret, allowed_updates=ALLOWED_UPDATES)
    await telegram.set_my_commands(COMMANDS)
    return await telegram.get_webhook_info()
