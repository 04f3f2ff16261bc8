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

from messageweave.config import features
from messageweave.config.model import (
    CHAT_ID_MAX,
    CHAT_ID_MIN,
    DELIVERY_POLICIES,
    FIELD_NAMES,
    GENERATED_SECRETS,
    MAX_ALLOWLIST,
    MAX_CHARS,
    MAX_ROLE_CHARS,
    MAX_ROLES,
    MIN_TOKEN_CHARS,
    NULLABLE_FIELDS,
)
from messageweave.config.outbound import (
    MAX_RETRIES_CAP,
    OUTBOUND_FIELDS,
    TIMEOUT_MAX_MS,
    TIMEOUT_MIN_MS,
)
from messageweave.pipeline.ingress import MAX_DLQ_LIMIT
from messageweave.pipeline.trace import MAX_QUERY
from messageweave.store import keys

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



_CLOCK = {"type": "string", "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$"}
_RULE: dict[str, Any] = {
    "type": "object", "required": ["name"], "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": features.MAX_RULE_NAME_CHARS},
        "from": {"type": "string", "maxLength": features.MAX_RULE_FROM_CHARS},
        "subject": {"type": "string", "maxLength": features.MAX_RULE_SUBJECT_CHARS},
        "mailbox_role": {"type": "string", "maxLength": features.MAX_RULE_ROLE_CHARS},
        "action": {"type": "string", "enum": list(features.RULE_ACTIONS)},
        "chat_id": {"type": "integer", "minimum": CHAT_ID_MIN, "maximum": CHAT_ID_MAX},
        "thread_id": {"type": "integer", "minimum": 1, "maximum": 2**31 - 1},
        "silent": {"type": "boolean"},
    },
}


def _wire_field(name: str) -> dict[str, Any]:
    """One business configuration field as the validation rules bound it (reference §5.2)."""
    if name in MAX_CHARS:
        schema: dict[str, Any] = {"type": "string", "maxLength": MAX_CHARS[name]}
        if name in GENERATED_SECRETS:
            schema["minLength"] = MIN_TOKEN_CHARS
        if name == "telegram_webhook_secret":
            schema["pattern"] = "^[A-Za-z0-9_-]+$"
        if name in NULLABLE_FIELDS:
            schema["type"] = ["string", "null"]
        return schema
    chat_id = {"type": "integer", "minimum": CHAT_ID_MIN, "maximum": CHAT_ID_MAX}
    others: dict[str, dict[str, Any]] = {
        "telegram_chat_id": chat_id,
        "chat_allowlist": {"type": "array", "items": chat_id, "minItems": 1,
                           "maxItems": MAX_ALLOWLIST},
        "notify_mailbox_roles": {"type": "array", "minItems": 1, "maxItems": MAX_ROLES,
                                 "items": {"type": "string", "maxLength": MAX_ROLE_CHARS}},
        "delivery_policy": {"type": "string", "enum": list(DELIVERY_POLICIES)},
        "llm_enabled": {"type": "boolean"},
        "llm_allow_net": {"type": "boolean"},
        "notify_rules": {"type": "array", "maxItems": features.MAX_RULES, "items": _RULE},
        "quiet_hours": {"oneOf": [{"type": "null"}, {
            "type": "object", "required": ["start", "end"], "additionalProperties": False,
            "properties": {"start": _CLOCK, "end": _CLOCK}}]},
        "digest_threshold": {"type": "integer", "minimum": 0,
                             "maximum": features.DIGEST_THRESHOLD_MAX},
        "bot_language": {"type": "string", "enum": list(features.BOT_LANGUAGES)},
        "telegram_updates": {"type": "string", "enum": list(features.TELEGRAM_UPDATES)},
        "push_mode": {"type": "string", "enum": list(features.PUSH_MODES)},
        "retry_window_s": {"type": "integer", "minimum": 0,
                           "maximum": features.RETRY_WINDOW_MAX_S},
        "read_in_chat": {"type": "boolean"},
        "owner_user_ids": {"type": "array", "maxItems": features.MAX_OWNERS, "items": {
            "type": "integer", "minimum": 1, "maximum": features.USER_ID_MAX}},
    }
    return others.get(name, {"type": "integer"})


_WIRE: dict[str, Any] = {
    "type": "object",
    "properties": {name: _wire_field(name) for name in FIELD_NAMES},
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


_STREAM = {"type": "string", "enum": list(keys.STREAMS)}
_LOG_QUERY = [_limit(200), _query("before", {"type": "string"})]

# (method, path) → the parts FastAPI cannot see: requestBody and parameters.
OPERATIONS: dict[tuple[str, str], dict[str, Any]] = {
    ("put", "/api/business-config"): {"requestBody": _body(_PATCH)},
    ("post", "/api/business-config/preflight"): {"requestBody": _body(_PATCH)},
    ("post", "/api/bootstrap"): {"requestBody": _body(_WIRE)},
    ("put", "/api/enabled"): {"requestBody": _body(
        {"type": "object", "required": ["enabled"], "properties": {"enabled": {"type": "boolean"}}}
    )},
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
    ("get", "/api/dlq"): {"parameters": [_query("stream", _STREAM), _limit(MAX_DLQ_LIMIT)]},
    ("post", "/api/dlq/replay"): {"requestBody": _body({
        "type": "object",
        "required": ["stream"],
        "properties": {"stream": _STREAM, "ids": {"type": "array", "items": {"type": "string"}}},
        "additionalProperties": False,
    })},
    ("get", "/api/logs/audit"): {"parameters": _LOG_QUERY},
    ("get", "/api/trace"): {"parameters": [
        {**_query("q", {"type": "string", "minLength": 1, "maxLength": MAX_QUERY}),
         "required": True}]},
    ("get", "/api/logs/send"): {"parameters": [*_LOG_QUERY, _query("outcome", {"type": "string"})]},
    ("post", "/api/rules/dry-run"): {"requestBody": _body({
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
