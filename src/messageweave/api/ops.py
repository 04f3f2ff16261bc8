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
from messageweave.probes import (
    Shared,
    guarded,
    probe_jmap_session,
    probe_telegram_get_me,
    probe_ttl,
)
from messageweave.services import Services
from messageweave.settings import Settings

router = APIRouter()

READY_FAILED_HEADER = "x-ready-failed"


def status_body(settings: Settings, version: str, *, settings_saved: bool = False
                ) -> dict[str, object]:
    """`mode` says whether the environment is complete (the contract's meaning);
    `settings_saved` whether a business configuration has been stored, so the page can tell
    "running, not configured yet" from "configured" (issue #15). Setup mode has none."""
    missing = settings.missing
    return {
        "ready": not missing,
        "mode": "configured" if not missing else "configuration-setup",
        "missing": missing,
        "version": version,
        "settings_saved": settings_saved and not missing,
    }


@router.get("/healthz")
async def healthz() -> PlainTextResponse:
    return PlainTextResponse("ok")


@router.get("/api/status")
async def api_status(request: Request) -> JSONResponse:
    """Always 200. `settings_saved` comes from the configuration revision after the same
    shared refresh `/ready` runs (a burst costs one Redis round trip, not one per request); a
    Redis failure leaves the last revision this instance saw."""
    svc = services(request)
    await _ready_checks(request).local.get(None, lambda: _local_check(svc))
    return JSONResponse(status_body(svc.settings, svc.version,
                                    settings_saved=svc.config.revision > 0))


class _ReadyChecks:
    """What `/ready` shares on one instance: the local check (configuration refresh, Redis,
    push), shared only while in flight, and one probe per peer, cached (`probe_ttl`) for the
    configuration revision it was made with."""

    def __init__(self) -> None:
        self.local: Shared[tuple[bool, str | None]] = Shared(lambda _answer: 0.0)
        self.jmap: Shared[str | None] = Shared(probe_ttl)
        self.telegram: Shared[str | None] = Shared(probe_ttl)


def _ready_checks(request: Request) -> _ReadyChecks:
    """This instance's shared checks, made on first use (one event loop: no race)."""
    checks = getattr(request.app.state, "ready_checks", None)
    if not isinstance(checks, _ReadyChecks):
        checks = request.app.state.ready_checks = _ReadyChecks()
    return checks


async def _local_check(svc: Services) -> tuple[bool, str | None]:
    """Reload a newer configuration, then (Redis answers, the push label)."""
    await svc.config.refresh()
    try:
        await svc.store.enabled()
        return True, (await push.health(svc.redis, time.time())).label
    except RedisError:
        return False, None


@router.get("/ready")
async def ready(request: Request) -> JSONResponse:
    """200 when the configuration is complete, Redis answers and both peers' probes pass; push
    is reported (`ok`, `degraded: <reason>`, `off`) but never fails readiness: mail still
    arrives through the (degraded) reconcile schedule. Else 503 (the error envelope) with the
    checks that ran and failed in `x-ready-failed`.

    Anyone can call `/ready`, so a burst must cost neither the peers nor our Redis pool one
    call per request: requests share the local check in flight, and each peer's probe in
    flight and for a few seconds after (`messageweave.probes.Shared`); a new configuration
    revision probes anew."""
    svc = services(request)
    shared = _ready_checks(request)
    redis_ok, push_label = await shared.local.get(None, lambda: _local_check(svc))
    cfg, revision = svc.config.config, svc.config.revision
    checks = {"configured": cfg is not None, "redis": redis_ok}
    if cfg is not None:  # the peers can only be probed with a configuration
        jmap_error, telegram_error = await asyncio.gather(
            shared.jmap.get(revision, lambda: guarded(probe_jmap_session, cfg)),
            shared.telegram.get(revision, lambda: guarded(probe_telegram_get_me, cfg)),
        )
        checks.update(jmap=jmap_error is None, telegram=telegram_error is None)
    failed = [name for name, ok in checks.items() if not ok]
    if failed:  # only the names of the checks: a probe's reason stays in the debug surface
        raise ApiError(503, "service_unavailable", retry=True,
                       headers={READY_FAILED_HEADER: ", ".join(failed)})
    return JSONResponse({"status": "ready", **checks, "push": push_label})
