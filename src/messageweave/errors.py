"""The error envelope: every error response is `{"error": code, "request_id": id}`, nothing else.

`RequestContext` is the outermost ASGI layer. It gives each request a 32-hex id (also sent as
`x-request-id`), refuses oversized bodies with 413 before anything parses them, and turns any
exception that escapes the app into a 500 envelope.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
from collections.abc import Callable
from typing import Any, TypeGuard

import orjson
from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

REQUEST_ID_HEADER = "x-request-id"
RETRY_AFTER = "30"
MAX_BODY_BYTES = 1024 * 1024

# Codes the framework itself produces, mapped onto the envelope.
_STATUS_CODES = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    422: "invalid_configuration",
    429: "rate_limited",
    500: "internal_error",
    503: "service_unavailable",
}


class ApiError(Exception):
    """An error answer: HTTP status, machine code, and whether clients should retry in 30 s."""

    def __init__(
        self,
        status: int,
        code: str,
        *,
        retry: bool = False,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(code)
        self.status = status
        self.code = code
        self.retry = retry
        self.headers = headers or {}


def invalid_request() -> ApiError:
    return ApiError(400, "invalid_request")


def unauthorized() -> ApiError:
    return ApiError(401, "unauthorized")


def conflict() -> ApiError:
    return ApiError(409, "conflict")


def service_unavailable() -> ApiError:
    return ApiError(503, "service_unavailable", retry=True)


def new_request_id() -> str:
    return secrets.token_hex(16)


def request_id_of(scope: Scope) -> str:
    state = scope.setdefault("state", {})
    rid = state.get("request_id")
    if not isinstance(rid, str):
        rid = new_request_id()
        state["request_id"] = rid
    return rid


def envelope(
    scope: Scope,
    status: int,
    code: str,
    *,
    retry: bool = False,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    rid = request_id_of(scope)
    out = {REQUEST_ID_HEADER: rid, **(headers or {})}
    if retry:
        out["Retry-After"] = RETRY_AFTER
    return JSONResponse({"error": code, "request_id": rid}, status_code=status, headers=out)


def api_error_response(scope: Scope, exc: ApiError) -> JSONResponse:
    return envelope(scope, exc.status, exc.code, retry=exc.retry, headers=exc.headers)


async def _api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return api_error_response(request.scope, exc)


async def _http_exception(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    headers = dict(exc.headers or {})
    fallback = "internal_error" if exc.status_code >= 500 else "invalid_request"
    code = _STATUS_CODES.get(exc.status_code, fallback)
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


# Deeper JSON is refused before `json.loads` sees it: the decoder recurses once per level, and
# no configuration, update or push object we read is nested more than a few levels.
MAX_JSON_DEPTH = 64
# A string literal (escapes included) or one bracket; brackets inside strings do not count.
_JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
# `\ud800`-style escapes: a lone one decodes to a string that cannot be encoded as UTF-8 later.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def json_depth(text: str) -> int:
    """How deeply `text` nests arrays and objects, counted without recursion."""
    depth = deepest = 0
    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            deepest = max(deepest, depth)
        elif token in ("]", "}"):
            depth -= 1
    return deepest


def _json_text(body: bytes) -> str:
    """The body as text in the encoding JSON allows (UTF-8, -16 or -32), else 400."""
    try:
        return body.decode(json.detect_encoding(body))
    except (UnicodeDecodeError, LookupError) as exc:
        raise invalid_request() from exc


def check_json_depth(body: bytes) -> None:
    """400 invalid_request when `body` nests deeper than `MAX_JSON_DEPTH`. For preflight, which
    answers other malformed JSON itself (in its 200 body)."""
    try:
        text = _json_text(body)
    except ApiError:
        return  # not JSON text at all: the route's own parse says so
    if json_depth(text) > MAX_JSON_DEPTH:
        raise invalid_request()


# 19 digits in a row: possibly an integer past 64 bits, which orjson reads as a float.
_LONG_NUMBER = re.compile(rb"[0-9]{19}")


def _fast_json(body: bytes) -> bool:
    """Whether orjson may read `body`: UTF-8, no long number, and too few brackets to nest
    deeper than `MAX_JSON_DEPTH` (a Telegram update, a push), so no depth scan is needed."""
    return (body.count(b"{") + body.count(b"[") <= MAX_JSON_DEPTH
            and json.detect_encoding(body) == "utf-8" and not _LONG_NUMBER.search(body))


def parse_json(body: bytes) -> Any:
    """The one reader of JSON request bodies: strict JSON (no NaN or Infinity, no lone UTF-16
    surrogate), nested at most `MAX_JSON_DEPTH` levels, else 400 invalid_request (never 500).

    Small UTF-8 bodies go to orjson first: where it succeeds it gives the value `json.loads`
    would (it refuses NaN, Infinity and lone surrogates itself); anything it refuses goes the
    exact way below, which decides, so the answers stay the same."""
    if _fast_json(body):
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
    text = _json_text(body)
    if json_depth(text) > MAX_JSON_DEPTH:
        raise invalid_request()
    try:
        value = json.loads(text, parse_constant=_reject_constant)
        if _SURROGATE_ESCAPE.search(text):  # a valid pair is one character; a lone half fails
            json.dumps(value, ensure_ascii=False).encode()
    except (ValueError, RecursionError) as exc:  # UnicodeEncodeError is a ValueError
        raise invalid_request() from exc
    return value


def dump_json(value: Any, default: Callable[[Any], Any] | None = None) -> str:
    """Compact JSON text, as `json.dumps(value, separators=(",", ":"), ensure_ascii=False)`
    writes it, by orjson (several times faster: the send log writes one per update, issue
    #26); the rare value orjson refuses (an integer past 64 bits, a key that is not a string)
    takes the stdlib's way. `default` turns an unknown type into one JSON knows."""
    try:
        return orjson.dumps(value, default=default).decode()
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=default)


def json_object(body: bytes) -> dict[str, Any]:
    """Parse a request body that must be a JSON object, else 400 invalid_request."""
    value = parse_json(body)
    if not isinstance(value, dict):
        raise invalid_request()
    return value


def is_int(value: object) -> TypeGuard[int]:
    """A JSON integer: an `int` that is not a `bool` (JSON's true/false are not numbers)."""
    return isinstance(value, int) and not isinstance(value, bool)
