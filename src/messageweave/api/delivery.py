"""Delivery routes: `/webhook/tg`, `/worker`, and the operator's queue/DLQ API."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from messageweave.api.accounts import acting_account
from messageweave.api.credentials import (
    constant_time_eq,
    ensure_enabled,
    require_admin,
    require_enabled,
    require_worker_token,
    services,
)
from messageweave.errors import ApiError, invalid_request, service_unavailable, unauthorized
from messageweave.jsonio import parse_json
from messageweave.ops import audit, metrics
from messageweave.pipeline import dlq, ingress
from messageweave.pipeline.worker import MAX_BATCH, Worker
from messageweave.services import Services
from messageweave.store import keys, opstats
from messageweave.store.keys import AccountKeys
from messageweave.store.oplog import valid_stream_id
from messageweave.store.streams import stream_key, stream_name

log = logging.getLogger(__name__)

router = APIRouter()

SECRET_HEADER = "x-telegram-bot-api-secret-token"
DEFAULT_DLQ_LIMIT = 50


class TelegramWebhook:
    """`POST /webhook/tg`, the route Telegram calls for every message, as a plain ASGI endpoint
    (issue #14): no `Request`, no dependency solving, no `Response` object, and served ahead
    of the framework's layers (`asgi.DirectRoutes`, issue #26). The request log, the
    gateway's signature, the request id and body limit stay the same (they are outside both),
    and an `ApiError` raised here is answered with its envelope as any route's is.

    401 for a wrong secret before anything else; then 503 while switched off, whatever the body;
    then 400/413 for the body; else 204: a redelivered update, and a chat outside the allowlist
    (recorded, not queued; 204 so Telegram does not resend it, issue #23). A message and a
    button press (`callback_query`, issue #16) take the same way to the worker. Accepted updates
    cost one Redis round trip, shared by the requests being served at that moment
    (`store.streams.UpdateIngress`): the switch is checked in it, and read separately only to
    answer a body that is refused. A refused chat costs one more write: it is remembered for the
    admin page (`GET /api/telegram/refused-chats`)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        svc: Services = scope["app"].state.services
        cfg = svc.config.config
        expected = cfg.telegram_webhook_secret if cfg is not None else ""
        if not constant_time_eq(Headers(scope=scope).get(SECRET_HEADER), expected):
            raise unauthorized()
        assert cfg is not None
        try:
            update = ingress.parse_update(parse_json(await _body(receive)), cfg,
                                          svc.accounts.allowlist())
        except ApiError:  # the body itself: not JSON (400), too large (413)
            await ensure_enabled(svc)  # switched off: 503, as if the body had not been read
            raise
        except ingress.UpdateInvalid as exc:
            await ensure_enabled(svc)
            raise invalid_request() from exc
        except ingress.ChatNotAllowed as exc:
            await ensure_enabled(svc)
            await _remember(svc, exc)
            # 204, not the contract's 403 (issue #23): Telegram resends any non-2xx answer,
            # so a 403 cost a script run and a refused count per resend, forever.
            await send(_NO_CONTENT)
            await send(_EMPTY_BODY)
            return
        try:
            queued = await ingress.enqueue_update_if_enabled(svc.ingress, update)
        except (ingress.SwitchedOff, RedisError) as exc:
            raise service_unavailable() from exc
        if queued:  # a redelivery is not a new event
            metrics.observe_ingest("telegram_webhook", 1)
        await send(_NO_CONTENT)
        await send(_EMPTY_BODY)


_NO_CONTENT: Message = {"type": "http.response.start", "status": 204, "headers": []}
_EMPTY_BODY: Message = {"type": "http.response.body", "body": b""}


async def _body(receive: Receive) -> bytes:
    """The whole request body; `ClientDisconnect` when the client leaves first (the request
    log then says 499, as for a body read through Starlette's `Request`)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


# Served ahead of the framework (`asgi.DirectRoutes`, issue #26); in the router for the 405 of
# its other methods and the route tables.
WEBHOOK = Route("/webhook/tg", TelegramWebhook(), methods=["POST"])
router.routes.append(WEBHOOK)


async def _remember(svc: Services, refusal: ingress.ChatNotAllowed) -> None:
    """Keep the refused chat for the admin page; failing to, the answer is still the 204."""
    try:
        await ingress.remember_refused(svc.redis, refusal)
    except RedisError:
        log.warning("refused chat not recorded: Redis unavailable")


def _batch(body: bytes) -> int:
    if not body.strip():
        return MAX_BATCH
    value = parse_json(body)
    if not isinstance(value, dict):
        raise invalid_request()
    batch = value.get("batch", 0)
    if batch is None:
        batch = 0
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 0:
        raise invalid_request()
    return MAX_BATCH if batch == 0 else min(batch, MAX_BATCH)


def _worker(request: Request) -> Worker:
    """The instance's worker (`runtime.serving` builds it, the app keeps it in `app.state`):
    a drain shares the continuous worker's consumer name, its taken entries and its chat
    lanes, so neither reclaims what the other works on and a chat's order holds across both."""
    worker: Worker = request.app.state.worker
    return worker


@router.post("/worker")
async def drain(request: Request) -> Response:
    await require_worker_token(request)
    await require_enabled(request)
    batch = _batch(await request.body())
    try:
        await _worker(request).drain_once(batch)
    except RedisError as exc:
        raise service_unavailable() from exc
    return Response(status_code=204)


@router.get("/api/delivery")
async def delivery_status(request: Request) -> JSONResponse:
    await require_admin(request)
    mailbox = await acting_account(request, mailbox=False)
    try:
        return JSONResponse(await opstats.delivery_status(mailbox.redis,
                                                          _streams(mailbox.keys)))
    except RedisError as exc:
        raise service_unavailable() from exc


def _streams(names: AccountKeys) -> list[str]:
    """The streams of an account's counts: its mail stream and the chat stream (the
    deployment's: one bot), in the order of `keys.STREAMS`."""
    return [names.stream_jmap, keys.STREAM_TELEGRAM]


def _dlq_streams(names: AccountKeys) -> list[str]:
    """The streams whose dead letters an account's list shows: its mail stream, and for
    `default` the chat stream too (as before accounts); another account's list never shows a
    dead letter of another account's chat."""
    return _streams(names) if names.account_id == keys.DEFAULT_ACCOUNT else [names.stream_jmap]


def _stream(value: object, names: AccountKeys) -> str:
    """The stream key a request names by its contract's name (`stalwart:jmap`: the account's
    mail stream)."""
    stream = stream_key(value, names.account_id) if isinstance(value, str) else None
    if stream is None:
        raise invalid_request()
    return stream


@router.get("/api/dlq")
async def list_dlq(request: Request) -> JSONResponse:
    await require_admin(request)
    mailbox = await acting_account(request, mailbox=False)
    raw_stream = request.query_params.get("stream")
    streams = _dlq_streams(mailbox.keys) if raw_stream is None else [_stream(raw_stream,
                                                                              mailbox.keys)]
    try:
        limit = int(request.query_params.get("limit", DEFAULT_DLQ_LIMIT))
    except ValueError as exc:
        raise invalid_request() from exc
    if not 1 <= limit <= dlq.MAX_DLQ_LIMIT:
        raise invalid_request()
    try:
        entries = await dlq.dlq_entries(mailbox.redis, streams, limit)
    except RedisError as exc:
        raise service_unavailable() from exc
    return JSONResponse({"entries": [e.to_json() for e in entries]})


@router.post("/api/dlq/replay")
async def replay_dlq(request: Request) -> JSONResponse:
    await require_admin(request)
    mailbox = await acting_account(request, mailbox=False)
    body = parse_json(await request.body())
    if not isinstance(body, dict) or set(body) - {"stream", "ids"}:
        raise invalid_request()
    stream = _stream(body.get("stream"), mailbox.keys)
    ids = body.get("ids")
    if ids is not None and (not isinstance(ids, list)
                            or not all(isinstance(i, str) and valid_stream_id(i) for i in ids)):
        raise invalid_request()
    svc = services(request)
    try:
        replayed = await dlq.replay(svc.redis, stream, ids)
    except RedisError as exc:
        raise service_unavailable() from exc
    await audit.record_audit(svc, audit.DLQ_REPLAYED, stream=stream_name(stream),
                             replayed=replayed, account=mailbox.keys.account_id)
    return JSONResponse({"replayed": replayed})
