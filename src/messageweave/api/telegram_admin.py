"""`/api/telegram/register-webhook`: point the bot's webhook at this service;
`/api/telegram/delete-webhook`: remove it again (its pending updates stay: the poller takes them);
`/api/telegram/refused-chats`: the chats it refused lately, to find the id to allow;
`/api/telegram/discover-chats`: the chats that sent the page's one-time code to a bot, from its
token alone (issues #22, #32)."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError

from messageweave.api.admin import invalid_configuration
from messageweave.api.credentials import require_admin, services
from messageweave.chat.telegram import FailureClass, TelegramClient, TelegramSendError
from messageweave.chat.webhook_setup import register_webhook, webhook_url_of
from messageweave.config.botapi import validate_bot_api
from messageweave.config.model import DEFAULT_TELEGRAM_API, ConfigInvalid
from messageweave.errors import ApiError, invalid_request, service_unavailable
from messageweave.jsonio import json_object
from messageweave.logs import scrub
from messageweave.ops import audit
from messageweave.pipeline import ingress
from messageweave.services import Services
from messageweave.store import discover
from messageweave.store.receivers import webhook_changed

log = logging.getLogger(__name__)

router = APIRouter()

# Telegram's own words for a refused call (502 `telegram_send_failed`), for the admin page: the
# body stays the bare envelope.
TELEGRAM_ERROR_HEADER = "x-telegram-error"
TELEGRAM_ERROR_MAX_CHARS = 200
# What `POST /api/telegram/discover-chats` takes.
DISCOVER_FIELDS = ("bot_token", "telegram_api_base_url")
DISCOVER_LIMIT = 100  # getUpdates' own maximum


def telegram_failed(svc: Services, exc: TelegramSendError) -> ApiError:
    """502 `telegram_send_failed`, with Telegram's description (the token and every configured
    secret removed, printable ASCII only, cut to `TELEGRAM_ERROR_MAX_CHARS`) in
    `x-telegram-error`, so the page can say why."""
    text = scrub(exc.description or exc.failure_class.value, svc.secrets())
    text = " ".join(text.split())[:TELEGRAM_ERROR_MAX_CHARS]
    safe = text.isascii() and text.isprintable()
    return ApiError(502, "telegram_send_failed",
                    headers={TELEGRAM_ERROR_HEADER: text} if text and safe else None)


@router.post("/api/telegram/register-webhook")
async def post_register_webhook(request: Request) -> JSONResponse:
    await require_admin(request)
    svc = services(request)
    url = webhook_url_of(json_object(await request.body()))
    if url is None:
        raise invalid_request()
    runtime = svc.runtime
    if runtime is None:
        raise service_unavailable()
    if runtime.config.telegram_updates == "polling":  # the poller would delete it again
        raise ApiError(409, "telegram_updates_polling")
    try:
        registered = await register_webhook(
            runtime.telegram, url, runtime.config.telegram_webhook_secret,
            runtime.config.bot_language,
        )
    except TelegramSendError as exc:
        log.warning("webhook registration refused: %s", exc.failure_class)
        raise telegram_failed(svc, exc) from exc
    webhook_changed(svc.redis)  # an instance polling would only learn of it at its next check
    await audit.record_audit(svc, audit.WEBHOOK_REGISTERED, url=registered)
    return JSONResponse({"url": registered})


@router.post("/api/telegram/delete-webhook")
async def post_delete_webhook(request: Request) -> JSONResponse:
    """deleteWebhook (pending updates kept): with `telegram_updates` `auto`, the poller takes
    over at once when this instance holds it, else within `pipeline.polling.WEBHOOK_CHECK_S`;
    none is lost (Telegram keeps them until a getUpdates offset confirms them) and none doubled
    (the `update_id` dedup)."""
    await require_admin(request)
    svc = services(request)
    runtime = svc.runtime
    if runtime is None:
        raise service_unavailable()
    try:
        await runtime.telegram.delete_webhook()
    except TelegramSendError as exc:
        log.warning("webhook deletion refused: %s", exc.failure_class)
        raise telegram_failed(svc, exc) from exc
    webhook_changed(svc.redis)  # this instance's poller takes over now, not at its next check
    await audit.record_audit(svc, audit.WEBHOOK_DELETED)
    return JSONResponse({"url": ""})


@router.get("/api/telegram/refused-chats")
async def get_refused_chats(request: Request) -> JSONResponse:
    """Newest first; a chat allowlisted since its refusal is left out, so adding it to
    `chat_allowlist` (`PUT /api/business-config`) takes it off the list."""
    await require_admin(request)
    svc = services(request)
    await svc.config.refresh()  # another instance may have saved the allowlist
    cfg = svc.config.config
    try:
        chats = await ingress.refused_chats(svc.redis, cfg.chat_allowlist if cfg else ())
    except RedisError as exc:
        raise service_unavailable() from exc
    return JSONResponse({"chats": [chat.to_json() for chat in chats]})


def _bot_api_of(svc: Services, body: bytes) -> tuple[str, str]:
    """The token and Bot API address to ask: the body's, each one left out being the stored
    configuration's (the address: the default when nothing is stored). 400 for a body that is
    not an object of `DISCOVER_FIELDS` with string values; 422 naming the field for a value a
    save would refuse."""
    obj = json_object(body) if body.strip() else {}
    if not set(obj) <= set(DISCOVER_FIELDS) or not all(
            isinstance(value, str) for value in obj.values()):
        raise invalid_request()
    cfg = svc.config.config
    token = obj.get("bot_token") or (cfg.bot_token if cfg is not None else "")
    base = obj.get("telegram_api_base_url") or (
        cfg.telegram_api_base_url if cfg is not None else DEFAULT_TELEGRAM_API)
    try:
        validate_bot_api(token, base)
    except ConfigInvalid as exc:
        raise invalid_configuration(str(exc)) from exc
    return token, base


@router.post("/api/telegram/discover-chats")
async def post_discover_chats(request: Request) -> JSONResponse:
    """Who sent "Find my chat"'s one-time code (`store.discover`, made here when none is in
    force) to the bot, from its token alone: `getUpdates` with `timeout=0` and no offset, so
    nothing is confirmed and every update stays for the service's own receiver. Answers the
    code, the bot's `t.me` link (None when getMe does not name the bot) and the chats that sent
    `/start <code>` with the sender's user id, never a message's text; a code that found its
    chat is spent. Telegram's 409 (a webhook is set, or another program long-polls this token)
    answers no chat (`conflict: true`): the updates cannot be read, and a refused chat's name
    proves nothing."""
    await require_admin(request)
    svc = services(request)
    await svc.config.refresh()  # "the stored one" is the newest stored one
    token, base = _bot_api_of(svc, await request.body())
    client = TelegramClient(token, api_base_url=base,
                            timeout_s=svc.config.outbound.telegram_timeout_ms / 1000)
    updates: list[object] = []
    conflict = False
    try:
        try:
            updates = await client.get_updates(None, timeout_s=0, limit=DISCOVER_LIMIT)
        except TelegramSendError as exc:
            if exc.failure_class is not FailureClass.CONFLICT:
                log.warning("chat discovery refused: %s", exc.failure_class)
                if exc.failure_class is FailureClass.AUTH:
                    raise invalid_configuration("BOT_TOKEN was refused by Telegram") from exc
                raise telegram_failed(svc, exc) from exc
            conflict = True
        try:  # made only once the token is known good: a refused one writes nothing
            code = await discover.current_code(svc.redis)
        except RedisError as exc:
            raise service_unavailable() from exc
        link = await _start_link(client, code.code)
    finally:
        await client.aclose()
    chats = ingress.chats_of_updates(updates, code.code)
    if chats:
        try:
            await discover.spend_code(svc.redis, code.code)
        except RedisError as exc:
            raise service_unavailable() from exc
    return JSONResponse({"chats": [chat.to_json() for chat in chats], "conflict": conflict,
                         "code": code.code, "expires_in_s": code.expires_in_s, "link": link})


async def _start_link(client: TelegramClient, code: str) -> str | None:
    """`https://t.me/<bot>?start=<code>`: opening it sends `/start <code>` from the owner's
    Telegram. None when getMe fails or names no username (the page shows the command)."""
    try:
        username = (await client.get_me()).username
    except TelegramSendError:
        return None
    named = username.isascii() and username.replace("_", "").isalnum()
    return f"https://t.me/{username}?start={code}" if named else None
