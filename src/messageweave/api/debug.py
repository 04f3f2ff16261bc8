"""The opt-in debug surface `/debug/*` (reference §3.1, §4: `DEBUG_TOKEN`).

Mounted only when requested (`--debug` or a truthy `DEBUG_ENABLED`) *and* `DEBUG_TOKEN` has at
least 32 characters (`settings.DEBUG_TOKEN_MIN_CHARS`; shorter, the start logs why); otherwise
every debug path is an ordinary 404. Every route needs `Bearer DEBUG_TOKEN`, throttled like
every credential (`api.credentials.require_debug_token`).
Probe failures are answers, not errors: `/debug/jmap` and `/debug/telegram` are always 200, and
name the cause as `/ready` does for an admin (`probes.ProbeFailure`: refused, timed out, TLS,
refused credentials), never a token.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from redis.exceptions import (
    AuthenticationError,
    BusyLoadingError,
    ConnectionError,
    RedisError,
    ResponseError,
    TimeoutError,
)

from messageweave.api.credentials import require_debug_token, services
from messageweave.chat.telegram import TelegramSendError
from messageweave.config.model import BusinessConfig
from messageweave.config.outbound import OutboundConfig
from messageweave.errors import ApiError, invalid_request, service_unavailable
from messageweave.ops.metrics import observe_call
from messageweave.probes import ProbeFailure, jmap_session_failure, telegram_get_me_failure
from messageweave.store.opstats import reconcile_cursor

DEFAULT_NOTIFY_TEXT = "messageweave debug: outbound test OK"
MAX_NOTIFY_CHARS = 1024


router = APIRouter(prefix="/debug", dependencies=[Depends(require_debug_token)])


def _outbound(outbound: OutboundConfig | None) -> dict[str, int] | None:
    return None if outbound is None else outbound.to_json()


def _runtime_view(cfg: BusinessConfig, outbound: OutboundConfig) -> dict[str, Any]:
    """Everything an operator needs to see what is configured; secrets only as booleans."""
    present = cfg.secrets_present()
    return {
        "timezone": cfg.timezone,
        "jmap": {"session_url": cfg.jmap_session_url, "username": cfg.jmap_username,
                 "account_id": cfg.account_id},
        "telegram": {"chat_id": cfg.telegram_chat_id,
                     "webhook_secret_configured": present["telegram_webhook_secret"]},
        "worker": {"worker_token_configured": present["worker_token"],
                   "reconcile_token_configured": present["reconcile_token"]},
        "llm": {"enabled": cfg.llm_enabled, "allow_net": cfg.llm_allow_net,
                "api_key_configured": present["llm_api_key"], "base_url": cfg.llm_base_url,
                "model": cfg.llm_model},
        "outbound": _outbound(outbound),
    }


@router.get("/ping")
async def debug_ping() -> JSONResponse:
    return JSONResponse({"ok": True})


@router.get("/config")
async def debug_config(request: Request) -> JSONResponse:
    svc = services(request)
    await svc.config.refresh()
    cfg = svc.config.config
    body: dict[str, Any] = {
        "revision": svc.config.revision,
        "setup_missing": svc.settings.missing,
        "business_configured": cfg is not None,
        "allowlist_size": 0 if cfg is None else len(cfg.chat_allowlist),
    }
    if cfg is not None and svc.runtime is not None:
        body.update(_runtime_view(cfg, svc.config.outbound))
    return JSONResponse(body)


def redis_failure_detail(exc: RedisError) -> str:
    """The documented detail string for a failed Redis probe."""
    if isinstance(exc, AuthenticationError):
        return "authentication_failed"
    if isinstance(exc, BusyLoadingError):
        return "busy_loading"
    if isinstance(exc, ConnectionError | TimeoutError):
        return "io_error"
    if isinstance(exc, ResponseError):
        return "response_error"
    return "client_error"


@router.get("/redis")
async def debug_redis(request: Request) -> JSONResponse:
    try:
        enabled = await services(request).store.enabled()
    except RedisError as exc:
        return JSONResponse({"reachable": False, "detail": redis_failure_detail(exc)})
    return JSONResponse({"reachable": True, "global_enabled": enabled})


def _probe_answer(failure: ProbeFailure | None) -> JSONResponse:
    """`{"ok": true}`, or the failure: `detail` (the documented short text), `reason` (a
    `probes.KINDS` code: `refused`, `timeout`, `tls`, `unauthorized`…), `cause` and `remedy`
    (English; a host and port at most, never a token, a password or a URL's path)."""
    if failure is None:
        return JSONResponse({"ok": True})
    return JSONResponse({"ok": False, "detail": failure.detail, "reason": failure.kind,
                         "cause": failure.cause, "remedy": failure.remedy})


def _not_configured(detail: str, remedy: str) -> JSONResponse:
    return _probe_answer(ProbeFailure(detail, "nothing is configured to probe", remedy,
                                      "not_configured"))


@router.get("/jmap")
async def debug_jmap(request: Request) -> JSONResponse:
    svc = services(request)
    await svc.config.refresh()
    cfg = svc.config.config
    if cfg is None or not cfg.jmap_session_url.strip():
        return _not_configured("jmap session url not configured", "set jmap_session_url")
    started = time.perf_counter()
    try:
        failure = await jmap_session_failure(cfg)
    except ValueError:  # a URL httpx cannot parse
        failure = ProbeFailure("jmap session url invalid", "jmap_session_url is not a URL",
                               "check jmap_session_url", "answer")
    observe_call("jmap", time.perf_counter() - started, failure is None)
    return _probe_answer(failure)


@router.get("/telegram")
async def debug_telegram(request: Request) -> JSONResponse:
    svc = services(request)
    await svc.config.refresh()
    cfg = svc.config.config
    if cfg is None:
        return _not_configured("telegram bot token not configured", "set bot_token")
    started = time.perf_counter()
    failure = await telegram_get_me_failure(cfg)
    observe_call("telegram", time.perf_counter() - started, failure is None)
    return _probe_answer(failure)


@router.get("/worker")
async def debug_worker(request: Request) -> JSONResponse:
    svc = services(request)
    try:
        cursor = await reconcile_cursor(svc.redis)
    except RedisError as exc:
        raise service_unavailable() from exc
    return JSONResponse({
        "revision": svc.config.revision,
        "reconcile_cursor": cursor,
        "outbound": _outbound(svc.config.outbound if svc.config.config is not None else None),
    })


def _chat_id(raw: str | None, default: int) -> int:
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise invalid_request() from exc


@router.post("/notify")
async def debug_notify(request: Request) -> JSONResponse:
    """Send a test message through the production `send_text` (query string only)."""
    svc = services(request)
    runtime = svc.runtime
    if runtime is None:
        raise service_unavailable()
    cfg = runtime.config
    chat_id = _chat_id(request.query_params.get("chat_id"), cfg.telegram_chat_id)
    if cfg.chat_allowlist and chat_id not in cfg.chat_allowlist:
        raise ApiError(403, "chat_not_allowed")
    text = (request.query_params.get("text") or DEFAULT_NOTIFY_TEXT)[:MAX_NOTIFY_CHARS]
    started = time.perf_counter()
    try:
        await runtime.telegram.send_text(chat_id, text)
    except TelegramSendError as exc:
        observe_call("telegram", time.perf_counter() - started, False)
        raise ApiError(502, "telegram_send_failed") from exc
    observe_call("telegram", time.perf_counter() - started, True)
    return JSONResponse({"ok": True, "chat_id": chat_id, "chars": len(text)})
