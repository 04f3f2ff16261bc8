"""The bot token and the Bot API address checked alone, with the messages of
`messageweave.config.model.validate` (§5.2): `POST /api/telegram/discover-chats` checks a typed
token before anything is saved (issue #22)."""

from __future__ import annotations

from messageweave.config.checks import blank, clean_origin, https_or_loopback_http, parse_url
from messageweave.config.errors import ConfigInvalid
from messageweave.config.fields import MAX_CHARS, MESSAGE_NAMES


def validate_bot_api(bot_token: str, telegram_api_base_url: str) -> None:
    """`ConfigInvalid` with the first of §5.2's rules the two values break."""
    if blank(bot_token):
        raise ConfigInvalid("missing or blank BOT_TOKEN")
    for attr, value in (("bot_token", bot_token),
                        ("telegram_api_base_url", telegram_api_base_url)):
        if len(value) > MAX_CHARS[attr]:
            raise ConfigInvalid(f"{MESSAGE_NAMES[attr]} must be at most {MAX_CHARS[attr]} "
                                "characters")
    if not (bot_token.isascii() and bot_token.isprintable()) or " " in bot_token:
        raise ConfigInvalid("BOT_TOKEN may contain only printable ASCII characters, no space")
    tg = parse_url(telegram_api_base_url)
    if tg is None:
        raise ConfigInvalid("TELEGRAM_API_BASE_URL must be a valid URL")
    if not https_or_loopback_http(tg) or not clean_origin(tg):
        raise ConfigInvalid("TELEGRAM_API_BASE_URL must use HTTPS")
