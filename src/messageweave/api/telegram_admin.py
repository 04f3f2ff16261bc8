"""`/api/telegram/register-webhook`: point the bot's webhook at this service;
`/api/telegram/delete-webhook`: remove it again (its pending updates stay: the poller takes them);
`/api/telegram/refused-chats`: the chats it refused lately, to find the id to allow."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError

from messageweave.api.services import require_admin, services
from messageweave.chat.telegram import TelegramSendError
from messageweave.chat.webhook_setup import register_webhook, webhook_url_of
from messageweave.errors import ApiError, invalid_request, json_object, service_unavailable
from messageweave.ops import audit
from messageweave.pipeline import service

log = logging.getLogger(__name__)

router = APIRouter()


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
        raise ApiError(502, "telegram_send_failed") from exc
    await audit.record_audit(svc, audit.WEBHOOK_REGISTERED, url=registered)
    return JSONResponse({"url": registered})


@router.post("/api/telegram/delete-webhook")
async def post_delete_webhook(request: Request) -> JSONResponse:
    """deleteWebhook (pending updates kept): with `telegram_updates` `auto`, the poller takes
    over within `pipeline.polling.WEBHOOK_CHECK_S`; none is lost (Telegram keeps them until a
    getUpdates offset confirms them) and none doubled (the `update_id` dedup)."""
    await require_admin(request)
    svc = services(request)
    runtime = svc.runtime
    if runtime is None:
        raise service_unavailable()
    try:
        await runtime.telegram.delete_webhook()
    except TelegramSendError as exc:
        log.warning("webhook deletion refused: %s", exc.failure_class)
        raise ApiError(502, "telegram_send_failed") from exc
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
        chats = await service.refused_chats(svc.redis, cfg.chat_allowlist if cfg else ())
    except RedisError as exc:
        raise service_unavailable() from exc
    return JSONResponse({"chats": [chat.to_json() for chat in chats]})
