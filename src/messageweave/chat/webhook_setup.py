"""Pointing the bot at this service: setWebhook with our secret, then the command menu."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from messageweave.chat import texts
from messageweave.chat.telegram import TelegramClient
from messageweave.config.features import BotLanguage

# Messages, and the presses of the buttons under notifications (issue #16).
ALLOWED_UPDATES = ("message", "callback_query")
# The menu's commands; their descriptions are `command_<name>` in `chat.texts`.
COMMANDS: tuple[str, ...] = ("help", "search", "summary", "read", "reply", "ai")


def commands(language: BotLanguage) -> tuple[tuple[str, str], ...]:
    """The command menu in `bot_language`."""
    table = texts.table(language)
    return tuple((name, table[f"command_{name}"]) for name in COMMANDS)


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


async def register_webhook(
    telegram: TelegramClient, url: str, secret: str, language: BotLanguage
) -> str:
    """setWebhook + setMyCommands (the menu in `language`); returns the URL Telegram now has
    (getWebhookInfo).

    Raises `TelegramSendError` when Telegram refuses any of the three calls.
    """
    await telegram.set_webhook(url, secret_token=secret, allowed_updates=ALLOWED_UPDATES)
    await telegram.set_my_commands(commands(language))
    return await telegram.webhook_url()
