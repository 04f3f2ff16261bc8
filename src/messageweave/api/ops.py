"""Probes and status: `/healthz`, `/ready`, `/api/status`."""

from __future__ import annotations

import asyncio
import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from redis.exceptions import RedisError

from messageweave.api.services import services
from messageweave.errors import ApiError
from messageweave.mail import push
from messageweave.probes import probe_jmap_session, probe_telegram_get_me
from messageweave.settings import Settings

router = APIRouter()

READY_FAILED_HEADER = "x-ready-failed"


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
    """Every field is the result of a check made now. 200 when the configuration is complete,
    Redis answers and both peers' probes pass; push is reported (`ok`, `degraded: <reason>`,
    `off`) but never fails readiness: mail still arrives through the (degraded) reconcile
    schedule. Else 503 (the error envelope) with the checks that ran and failed in
    `x-ready-failed`."""
    svc = services(request)
    await svc.config.refresh()
    cfg = svc.config.config
    push_label: str | None = None
    try:
        await svc.store.enabled()
        push_label = (await push.health(svc.redis, time.time())).label
        redis_ok = True
    except RedisError:
        redis_ok = False
    checks = {"configured": cfg is not None, "redis": redis_ok}
    if cfg is not None:  # the peers can only be probed with a configuration
        jmap_error, telegram_error = await asyncio.gather(
            probe_jmap_session(cfg), probe_telegram_get_me(cfg)
        )
        checks.update(jmap=jmap_error is None, telegram=telegram_error is None)
    failed = [name for name, ok in checks.items() if not ok]
    if failed:
        raise ApiError(503, "service_unavailable", retry=True,
                       headers={READY_FAILED_HEADER: ", ".join(failed)})
    return JSONResponse({"status": "ready", **checks, "push": push_label})
