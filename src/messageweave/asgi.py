"""The HTTP layers around the app: `RequestContext` is the outermost ASGI layer (it gives each
request a 32-hex id, also sent as `x-request-id`, refuses oversized bodies with 413 before
anything parses them, and turns any exception that escapes the app into a 500 envelope),
`DirectRoutes` serves the hot routes ahead of the framework, and `install_handlers` maps the
framework's own errors onto the envelope (`messageweave.errors`).
"""

from __future__ import annotations

import logging
import re

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from messageweave.errors import (
    REQUEST_ID_HEADER,
    STATUS_CODES,
    ApiError,
    api_error_response,
    envelope,
    request_id_of,
)

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1024 * 1024


async def _api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return api_error_response(request.scope, exc)


async def _http_exception(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    headers = dict(exc.headers or {})
    fallback = "internal_error" if exc.status_code >= 500 else "invalid_request"
    code = STATUS_CODES.get(exc.status_code, fallback)
    retry = exc.status_code in (429, 503)
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(_allowed_methods(request))
    return envelope(request.scope, exc.status_code, code, retry=retry, headers=headers)


def _allowed_methods(request: Request) -> list[str]:
    """Every method any route on this path accepts (Starlette reports only the first route's)."""
    table: list[tuple[re.Pattern[str], set[str]]] = getattr(request.app.state, "route_methods", [])
    methods: set[str] = set()
    for pattern, route_methods in table:
        if pattern.match(request.url.path):
            methods.update(route_methods)
    methods.discard("HEAD")
    return sorted(methods)


def route_methods(routers: list[APIRouter]) -> list[tuple[re.Pattern[str], set[str]]]:
    """(path pattern, methods) for every route, for the `Allow` header of a 405."""
    table = []
    for router in routers:
        for route in router.routes:
            if isinstance(route, Route) and route.methods:
                table.append((route.path_regex, set(route.methods)))
    return table


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    return envelope(request.scope, 400, "invalid_request")


async def _unhandled(request: Request, exc: Exception) -> JSONResponse:
    if isinstance(exc, ClientDisconnect):  # nothing failed and nobody is left to answer:
        raise exc  # `logs.RequestLog`, outside the framework, logs the request as 499
    log.error("unhandled error on %s %s: %s", request.method, request.url.path,
              type(exc).__name__)
    return envelope(request.scope, 500, "internal_error")


def install_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(StarletteHTTPException, _http_exception)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Exception, _unhandled)


class _BodyTooLarge(ApiError):
    """Raised from `receive` when a body without Content-Length grows past the limit."""

    def __init__(self) -> None:
        super().__init__(413, "payload_too_large")


class HttpMiddleware:
    """A pure ASGI middleware that acts on HTTP requests only (`handle`); every other scope
    (lifespan, websocket) passes straight through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.handle(scope, receive, send)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise NotImplementedError


class DirectRoutes(HttpMiddleware):
    """The routes served ahead of the framework (issue #26): a request whose method and path
    are one of `routes`' goes straight to that route's plain ASGI endpoint, past FastAPI's own
    layers (its telemetry, body limit, exception and exit-stack middleware, and the router),
    which cost the webhook a fifth of its time. Everything else goes to `app`, the FastAPI
    app, whose router holds the same routes: a request with another method is answered 405
    there, and the route tables (`route_methods`, docs/reference.md) stay one.

    What the endpoint sees is what it would see through the router: `scope["app"]` is the
    FastAPI app (Starlette sets it so), and an `ApiError` it raises is answered with its
    envelope, as the framework's handler (`_api_error`) answers it. Anything else it raises
    goes to `RequestContext`, the last resort, as any route's does once answered."""

    def __init__(self, app: FastAPI, routes: list[Route]) -> None:
        super().__init__(app)
        self.direct = {(method, route.path): route.app
                       for route in routes for method in route.methods or ()}

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = self.direct.get((scope["method"], scope["path"]))
        if endpoint is None:
            await self.app(scope, receive, send)
            return
        scope["app"] = self.app  # the FastAPI app
        try:
            await endpoint(scope, receive, send)
        except ApiError as exc:
            await api_error_response(scope, exc)(scope, receive, send)


class RequestContext(HttpMiddleware):
    """Outermost ASGI middleware: request id header, body size limit, last-resort 500."""

    def __init__(self, app: ASGIApp, max_body: int = MAX_BODY_BYTES) -> None:
        super().__init__(app)
        self.max_body = max_body

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        rid = request_id_of(scope)
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = list(message.get("headers", []))
                if not any(k.lower() == REQUEST_ID_HEADER.encode() for k, _ in headers):
                    headers.append((REQUEST_ID_HEADER.encode(), rid.encode()))
                message = {**message, "headers": headers}
            await send(message)

        declared = _content_length(scope)
        if declared is not None and declared > self.max_body:
            await envelope(scope, 413, "payload_too_large")(scope, receive, send_with_id)
            return

        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body:
                    raise _BodyTooLarge
            return message

        try:
            await self.app(scope, limited_receive, send_with_id)
        except _BodyTooLarge:
            if not started:
                await envelope(scope, 413, "payload_too_large")(scope, receive, send_with_id)
        except Exception as exc:  # the app's own handler already answered 500 when it could
            if not started:
                log.error("unhandled error: %s", type(exc).__name__)
                await envelope(scope, 500, "internal_error")(scope, receive, send_with_id)


def _content_length(scope: Scope) -> int | None:
    for key, value in scope.get("headers", []):
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
