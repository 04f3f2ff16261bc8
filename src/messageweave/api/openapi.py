"""`GET /openapi.json`: the generated schema plus the request bodies and query parameters.

Handlers read raw bodies and query strings (so bad input gets our own codes), which leaves
FastAPI's generated schema without them; `OPERATIONS` supplies them in one place. Every
operation also declares the error envelope as its `default` response.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse

from messageweave.config.accounts import ACCOUNT_ID_PATTERN, NAME_MAX_CHARS
from messageweave.config.fields import ACCOUNT_FIELD_NAMES, FIELD, FIELDS, MIN_TOKEN_CHARS, Field
from messageweave.config.outbound import (
    MAX_RETRIES_CAP,
    OUTBOUND_FIELDS,
    TIMEOUT_MAX_MS,
    TIMEOUT_MIN_MS,
)
from messageweave.pipeline.dlq import MAX_DLQ_LIMIT
from messageweave.pipeline.trace import MAX_QUERY
from messageweave.store.streams import STREAM_NAMES

router = APIRouter()

ENVELOPE: dict[str, Any] = {
    "type": "object",
    "required": ["error", "request_id"],
    "properties": {"error": {"type": "string"}, "request_id": {"type": "string"}},
    "additionalProperties": False,
}
_ERROR_RESPONSE = {
    "description": "Error envelope",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}



def _bounds(spec: Field) -> dict[str, Any]:
    return {key: value for key, value in (("minimum", spec.minimum),
                                          ("maximum", spec.maximum)) if value is not None}


def _string(spec: Field) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": ["string", "null"] if spec.nullable else "string"}
    if spec.choices:
        schema["enum"] = list(spec.choices)
    if spec.max_chars is not None:
        schema["maxLength"] = spec.max_chars
    if spec.generated:
        schema["minLength"] = MIN_TOKEN_CHARS
    if spec.pattern is not None:
        schema["pattern"] = spec.pattern
    return schema


def field_schema(spec: Field) -> dict[str, Any]:
    """One business configuration field as its declaration bounds it (`config.fields`,
    reference §5.2)."""
    if spec.schema is not None:
        return dict(spec.schema)
    if spec.kind == "str":
        return _string(spec)
    if spec.kind == "bool":
        return {"type": "boolean"}
    if spec.kind == "int":
        return {"type": "integer", **_bounds(spec)}
    items: dict[str, Any] = (
        {"type": "integer", **_bounds(spec)} if spec.kind == "int_list"
        else {"type": "string", "maxLength": spec.max_chars})
    schema: dict[str, Any] = {"type": "array", "items": items}
    if spec.min_items is not None:
        schema["minItems"] = spec.min_items
    if spec.max_items is not None:
        schema["maxItems"] = spec.max_items
    return schema


def _wire_field(name: str) -> dict[str, Any]:
    return field_schema(FIELD[name])


_WIRE: dict[str, Any] = {
    "type": "object",
    "properties": {spec.name: field_schema(spec) for spec in FIELDS},
    "additionalProperties": False,
}
_PATCH = {**_WIRE, "properties": {**_WIRE["properties"],
                                  "revision": {"type": "integer", "minimum": 0}}}
_HTTPS_URL = "^https://[^/?#@\\s]+(/[^#\\s]*)?$"
_CALLBACK = {
    "type": "object",
    "required": ["callback_url"],
    "properties": {"callback_url": {"type": "string", "pattern": _HTTPS_URL}},
}
_TIMEOUT = {"type": "integer", "minimum": TIMEOUT_MIN_MS, "maximum": TIMEOUT_MAX_MS}
_OUTBOUND = {name: _TIMEOUT for name in OUTBOUND_FIELDS if name != "max_retries"}
_OUTBOUND["max_retries"] = {"type": "integer", "minimum": 0, "maximum": MAX_RETRIES_CAP}
_PUSH = {
    "oneOf": [
        {"type": "object", "required": ["@type", "pushSubscriptionId", "verificationCode"],
         "properties": {"@type": {"const": "PushVerification"},
                        "pushSubscriptionId": {"type": "string"},
                        "verificationCode": {"type": "string"}}},
        {"type": "object", "required": ["@type", "changed"],
         "properties": {"@type": {"const": "StateChange"},
                        "changed": {"type": "object",
                                    "additionalProperties": {"type": "object"}}}},
    ]
}


def _body(schema: dict[str, Any], *, required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


def _query(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema}


def _limit(maximum: int) -> dict[str, Any]:
    return _query("limit", {"type": "integer", "minimum": 1, "maximum": maximum})


_STREAM = {"type": "string", "enum": list(STREAM_NAMES)}
# Issue #35: an account wire (reference §5.8), the `{id}` of the account routes, `?account=`.
_ACCOUNT_ID = {"type": "string", "pattern": ACCOUNT_ID_PATTERN}
_ACCOUNT_PATCH: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string", "minLength": 1, "maxLength": NAME_MAX_CHARS},
                   "revision": {"type": "integer", "minimum": 0},
                   **{name: field_schema(FIELD[name]) for name in ACCOUNT_FIELD_NAMES}},
    "additionalProperties": False,
}
_NEW_ACCOUNT = {**_ACCOUNT_PATCH, "required": ["id", "name"],
                "properties": {**_ACCOUNT_PATCH["properties"], "id": _ACCOUNT_ID}}
_PATH_ID = {"name": "id", "in": "path", "required": True, "schema": _ACCOUNT_ID}
_ACCOUNT_QUERY = _query("account", _ACCOUNT_ID)
_ENABLED_BODY = _body({"type": "object", "required": ["enabled"],
                       "properties": {"enabled": {"type": "boolean"}}})
_LOG_QUERY = [_limit(200), _query("before", {"type": "string"})]

# (method, path) → the parts FastAPI cannot see: requestBody and parameters.
OPERATIONS: dict[tuple[str, str], dict[str, Any]] = {
    ("put", "/api/business-config"): {"requestBody": _body(_PATCH)},
    ("post", "/api/business-config/preflight"): {"requestBody": _body(_PATCH)},
    ("post", "/api/bootstrap"): {"requestBody": _body(_WIRE)},
    ("put", "/api/enabled"): {"requestBody": _ENABLED_BODY},
    ("put", "/api/config"): {"requestBody": _body({
        "type": "object",
        "required": list(OUTBOUND_FIELDS),
        "properties": _OUTBOUND,
        "additionalProperties": False,
    })},
    ("post", "/webhook/tg"): {
        "parameters": [{"name": "X-Telegram-Bot-Api-Secret-Token", "in": "header",
                        "required": False, "schema": {"type": "string"}}],
        "requestBody": _body({
            "type": "object",
            "required": ["update_id"],
            "properties": {"update_id": {"type": "integer", "minimum": 0},
                           "message": {"type": "object"},
                           "callback_query": {"type": "object"}},
        }),
    },
    ("post", "/worker"): {"requestBody": _body(
        {"type": "object", "properties": {"batch": {"type": ["integer", "null"], "minimum": 0}}},
        required=False,
    )},
    ("get", "/api/dlq"): {"parameters": [_query("stream", _STREAM), _limit(MAX_DLQ_LIMIT),
                                         _ACCOUNT_QUERY]},
    ("post", "/api/dlq/replay"): {"parameters": [_ACCOUNT_QUERY], "requestBody": _body({
        "type": "object",
        "required": ["stream"],
        "properties": {"stream": _STREAM, "ids": {"type": "array", "items": {"type": "string"}}},
        "additionalProperties": False,
    })},
    ("get", "/api/logs/audit"): {"parameters": _LOG_QUERY},
    ("get", "/api/trace"): {"parameters": [
        {**_query("q", {"type": "string", "minLength": 1, "maxLength": MAX_QUERY}),
         "required": True}, _ACCOUNT_QUERY]},
    ("get", "/api/logs/send"): {"parameters": [*_LOG_QUERY, _query("outcome", {"type": "string"}),
                                               _ACCOUNT_QUERY]},
    ("post", "/api/rules/dry-run"): {"parameters": [_ACCOUNT_QUERY], "requestBody": _body({
        "type": "object",
        "properties": {name: _wire_field(name) for name in ("notify_rules", "quiet_hours")},
        "additionalProperties": False,
    }, required=False)},
    ("post", "/api/telegram/register-webhook"): {"requestBody": _body(_CALLBACK)},
    ("post", "/api/telegram/discover-chats"): {"requestBody": _body({
        "type": "object",
        "properties": {name: _wire_field(name)
                       for name in ("bot_token", "telegram_api_base_url")},
        "additionalProperties": False,
    }, required=False)},
    ("post", "/api/push/register"): {"requestBody": _body(_CALLBACK)},
    ("post", "/api/push/disable"): {"requestBody": _body(_CALLBACK)},
    # `t`: the subscription's callback token (issue #23); without it every post is 401.
    ("post", "/push/jmap"): {"requestBody": _body(_PUSH),
                             "parameters": [_query("t", {"type": "string"})]},
    ("get", "/api/audit"): {"parameters": [_ACCOUNT_QUERY]},
    ("get", "/api/delivery"): {"parameters": [_ACCOUNT_QUERY]},
    ("post", "/api/audit"): {"parameters": [_ACCOUNT_QUERY]},
    ("post", "/reconcile"): {"parameters": [_ACCOUNT_QUERY]},
    ("post", "/api/accounts"): {"requestBody": _body(_NEW_ACCOUNT)},
    ("get", "/api/accounts/{id}"): {"parameters": [_PATH_ID]},
    ("put", "/api/accounts/{id}"): {"parameters": [_PATH_ID],
                                    "requestBody": _body(_ACCOUNT_PATCH)},
    ("delete", "/api/accounts/{id}"): {"parameters": [_PATH_ID]},
    ("put", "/api/accounts/{id}/enabled"): {"parameters": [_PATH_ID],
                                            "requestBody": _ENABLED_BODY},
    ("get", "/api/accounts/{id}/status"): {"parameters": [_PATH_ID]},
    ("post", "/api/accounts/{id}/owner-key"): {"parameters": [_PATH_ID]},
    # An owner session ends itself (no body needed); an admin session names the account.
    ("post", "/api/owner/session/revoke"): {"requestBody": _body({
        "type": "object", "properties": {"account": _ACCOUNT_ID}, "additionalProperties": False,
    }, required=False)},
    ("post", "/debug/notify"): {"parameters": [_query("chat_id", {"type": "integer"}),
                                               _query("text", {"type": "string"})]},
}


# Routes served by a plain ASGI endpoint, which have no signature for FastAPI to read: their
# operation is written here (`api.delivery.TelegramWebhook`, issue #14).
PLAIN_ROUTES: dict[tuple[str, str], dict[str, Any]] = {
    ("post", "/webhook/tg"): {
        "summary": "Telegram Webhook",
        "operationId": "telegram_webhook",
        "responses": {"204": {"description": "Accepted (a redelivered update included)"}},
    },
}


def build_schema(app: FastAPI) -> dict[str, Any]:
    schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
    for (method, path), operation in PLAIN_ROUTES.items():
        schema.setdefault("paths", {}).setdefault(path, {})[method] = dict(operation)
    for path, item in schema.get("paths", {}).items():
        for method, operation in item.items():
            operation.update(OPERATIONS.get((method, path), {}))
            operation.setdefault("responses", {})["default"] = _ERROR_RESPONSE
    schema.setdefault("components", {}).setdefault("schemas", {})["Error"] = ENVELOPE
    return schema


def schema_of(app: FastAPI) -> dict[str, Any]:
    if app.openapi_schema is None:
        app.openapi_schema = build_schema(app)
    return app.openapi_schema


@router.get("/openapi.json", include_in_schema=False)
async def openapi_json(request: Request) -> JSONResponse:
    return JSONResponse(schema_of(request.app))
