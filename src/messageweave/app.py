"""`create_app()`: the ASGI application for configured mode or setup mode."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.types import ASGIApp

from messageweave import runtime
from messageweave.api import accounts, admin, debug, delivery, mailbox, ops, telegram_admin
from messageweave.api import gap_audit as gap_audit_api
from messageweave.api import logs as logs_api
from messageweave.api import metrics as metrics_api
from messageweave.api import openapi as openapi_api
from messageweave.api import rules as rules_api
from messageweave.api import trace as trace_api
from messageweave.api.gateway import GatewaySignature
from messageweave.api.headers import SecurityHeaders
from messageweave.api.throttle import ClientAddressPolicy
from messageweave.asgi import DirectRoutes, RequestContext, install_handlers, route_methods
from messageweave.errors import service_unavailable
from messageweave.logs import RequestLog
from messageweave.settings import Settings
from messageweave.version import build_version
from messageweave.web import static

log = logging.getLogger(__name__)

# Outbound HTTP libraries log request URLs, and a Telegram URL carries the bot token.
for _noisy in ("httpx", "httpcore"):
    logging.getLogger(_noisy).setLevel(logging.WARNING)


def _fastapi(lifespan: object = None) -> FastAPI:
    app = FastAPI(
        title="MessageWeave",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        lifespan=lifespan,  # type: ignore[arg-type]
    )
    install_handlers(app)
    return app


def _layers(settings: Settings, app: ASGIApp) -> ASGIApp:
    """The pure ASGI layers around the app, outermost first: the security headers, the
    request id and body limit with the last-resort 500, the request log, then the gateway's
    signature (inside the log, so a refused request is logged too)."""
    if settings.gateway_secret:
        app = GatewaySignature(app, secret=settings.gateway_secret)
    return SecurityHeaders(RequestContext(RequestLog(app)), hsts=bool(settings.gateway_secret))


def _include(app: FastAPI, routers: list[APIRouter]) -> None:
    for router in routers:
        app.include_router(router)
    app.state.route_methods = route_methods(routers)


def create_setup_app(settings: Settings) -> ASGIApp:
    """Setup mode: `/healthz`, `/ready` (always 503), `/api/status` and the page; else 404."""
    version = build_version()
    app = _fastapi()
    router = APIRouter()

    @router.get("/healthz")
    async def healthz() -> PlainTextResponse:
        return PlainTextResponse("ok")

    @router.get("/ready")
    async def ready() -> JSONResponse:
        raise service_unavailable()

    @router.get("/api/status")
    async def api_status() -> JSONResponse:
        return JSONResponse(ops.status_body(settings, version))

    _include(app, [router, static.router])
    return _layers(settings, app)


def create_app(settings: Settings) -> ASGIApp:
    if not settings.configured:
        log.warning("setup mode: missing %s", ", ".join(settings.missing))
        return create_setup_app(settings)

    svc = runtime.build_services(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with runtime.serving(svc) as worker:
            app.state.worker = worker
            yield

    app = _fastapi(lifespan)
    app.state.services = svc
    app.state.client_address = ClientAddressPolicy.parse(settings.trusted_proxy_header,
                                                         settings.trusted_proxies)
    # `/webhook/tg`, the route Telegram calls for every message, is served ahead of the
    # framework (`DirectRoutes`, issue #26); its router stays first among the routers for the
    # 405 of its other methods.
    routers = [delivery.router, ops.router, admin.router, mailbox.router, telegram_admin.router,
               logs_api.router, metrics_api.router, gap_audit_api.router, openapi_api.router,
               trace_api.router, rules_api.router, accounts.router, static.router]
    if settings.debug_enabled:
        routers.append(debug.router)
    elif settings.debug_refusal:
        log.warning("%s", settings.debug_refusal)
    _include(app, routers)
    return _layers(settings, DirectRoutes(app, [delivery.WEBHOOK]))
