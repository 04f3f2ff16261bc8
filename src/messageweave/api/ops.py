"""Probes and status: `/healthz`, `/ready`, `/api/status`."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from redis.exceptions import RedisError

from messageweave.api.services import services
from messageweave.errors import service_unavailable
from messageweave.probes import probe_jmap_session, probe_telegram_get_me
from messageweave.settings import Settings

router = APIRouter()


def status_body(settings: Settings, version: str) -> dict[str, object]:
    missing = settings.missing
    return {
        "ready": not missing,
        "mode": "configured" if not missing else "configuration-setup",
        "missing": missing,
        "version": version,
    }


@router.get("/healthz")
async def healthz() -> PlainTextResponse:
    return PlainTextResponse("ok")


@router.get("/api/status")
async def api_status(request: Request) -> JSONResponse:
    svc = services(request)
    return JSONResponse(status_body(svc.settings, svc.version))


@router.get("/ready")
async def ready(request: Request) -> JSONResponse:
    svc = services(request)
    await svc.config.refresh()
    cfg = svc.config.config
    try:
        await svc.store.enabled()
        redis_ok = True
    except RedisError:
        redis_ok = False
    if cfg is None or not redis_ok:
        raise service_unavailable()
    jmap_error, telegram_error = await asyncio.gather(
        probe_jmap_session(cfg), probe_telegram_get_me(cfg)
    )
    if jmap_error or telegram_error:
        raise service_unavailable()
    return JSONResponse({"status": "ready", "configured": True, "redis": True, "jmap": True,
                         "push": True, "telegram": True})
