"""The error envelope: every error response is `{"error": code, "request_id": id}`, nothing else.

`ApiError` is an error answer; `envelope` writes one. The ASGI layers that give each request its
id, limit its body and answer what escapes the app are `messageweave.asgi`'s; the JSON reader
and writer are `messageweave.jsonio`'s.
"""

from __future__ import annotations

import secrets

from fastapi.responses import JSONResponse
from starlette.types import Scope

REQUEST_ID_HEADER = "x-request-id"
RETRY_AFTER = "30"

# Codes the framework itself produces, mapped onto the envelope.
STATUS_CODES = {
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
