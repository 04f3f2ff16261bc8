"""Readiness probes shared by `/ready` and the debug surface: JMAP session and Telegram getMe."""

from __future__ import annotations

import asyncio

import httpx

from messageweave.config.model import BusinessConfig
from messageweave.config.runtime import jmap_origin_probe_url
from messageweave.mail.jmap import build_ssl_context

PROBE_TIMEOUT_S = 3.0


async def probe_jmap_session(cfg: BusinessConfig, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None when `GET {origin}/.well-known/jmap` with Basic auth answers 2xx, else why not."""
    url = jmap_origin_probe_url(cfg.jmap_session_url)
    auth = httpx.BasicAuth(cfg.jmap_username, cfg.jmap_password)
    try:
        async with httpx.AsyncClient(
            timeout=timeout_s, follow_redirects=True, verify=build_ssl_context()
        ) as client:
            response = await asyncio.wait_for(client.get(url, auth=auth), timeout_s)
    except (TimeoutError, httpx.TimeoutException):
        return "jmap session probe timed out"
    except httpx.HTTPError:
        return "jmap session probe failed"
    return None if response.is_success else "jmap session probe failed"


async def probe_telegram_get_me(
    cfg: BusinessConfig, timeout_s: float = PROBE_TIMEOUT_S
) -> str | None:
    """None when the Bot API's getMe answers 2xx for the configured token, else why not."""
    if not cfg.bot_token.strip():
        return "telegram bot token not configured"
    url = f"{cfg.telegram_api_base_url.rstrip('/')}/bot{cfg.bot_token}/getMe"
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            response = await asyncio.wait_for(client.get(url), timeout_s)
    except (TimeoutError, httpx.TimeoutException):
        return "telegram get_me probe timed out"
    except httpx.HTTPError:
        return "telegram get_me probe failed"
    return None if response.is_success else "telegram get_me probe failed"
