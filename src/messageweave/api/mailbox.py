"""Mailbox routes: `/reconcile`, `/push/jmap`, `/api/push/register`, `/api/push/disable`,
`/api/push/status`.

`mail.push` raises its own errors (`PushError`); `_push_errors` turns each into the status and
envelope code of reference §2, so the push code speaks no HTTP."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError

from messageweave.api.account_status import default_push
from messageweave.api.accounts import acting_account
from messageweave.api.credentials import (
    require_admin,
    require_enabled,
    require_reconcile_token,
    services,
)
from messageweave.config.live import NotConfigured
from messageweave.errors import ApiError, conflict, service_unavailable
from messageweave.jsonio import json_object
from messageweave.mail import push
from messageweave.mail.errors import MailError
from messageweave.mail.jmap import JmapClient, JmapError
from messageweave.mail.passes import ReconcileBusy, ReconcileError
from messageweave.mail.scheduler import run_pass
from messageweave.ops import audit
from messageweave.pipeline.polling import read_label
from messageweave.services import Services
from messageweave.store.locks import LockLost

log = logging.getLogger(__name__)

router = APIRouter()


# The status of each `mail.push` error; 429 and 503 also carry `Retry-After` (reference §2).
_PUSH_STATUS: dict[type[push.PushError], int] = {
    push.PushInvalid: 400,
    push.UnknownCallback: 401,
    push.SubscriptionNotFound: 404,
    push.RegistrationBusy: 409,
    push.VerifyRateLimited: 429,
    push.PushNotSupported: 502,
    push.PushUnavailable: 503,
}


@contextmanager
def _push_errors() -> Iterator[None]:
    """A `mail.push` error becomes its answer: the status of `_PUSH_STATUS`, its own code."""
    try:
        yield
    except push.PushError as exc:
        status = _PUSH_STATUS[type(exc)]
        raise ApiError(status, exc.code, retry=status in (429, 503)) from exc


def _reconcile_retry() -> ApiError:
    return ApiError(503, "reconcile_retry", retry=True)


async def _jmap(svc: Services) -> JmapClient:
    try:
        return await svc.jmap()
    except (NotConfigured, JmapError) as exc:
        raise service_unavailable() from exc


@router.post("/reconcile", status_code=204)
async def post_reconcile(request: Request) -> Response:
    """One reconcile pass now (external cron). The request body is ignored."""
    await require_reconcile_token(request)
    mailbox = await acting_account(request, mailbox=True)
    await require_enabled(request)
    try:
        await run_pass(mailbox)
    except ReconcileBusy as exc:
        raise conflict() from exc
    except RedisError as exc:
        raise service_unavailable() from exc
    except (ReconcileError, LockLost, MailError, NotConfigured) as exc:
        log.warning("reconcile failed: %s", type(exc).__name__)
        raise _reconcile_retry() from exc
    return Response(status_code=204)


@router.post("/push/jmap", status_code=204)
async def post_push(request: Request) -> Response:
    """RFC 8620 pushes: PushVerification completes verification, StateChange schedules a
    catch-up. First of all the URL's token must be the subscription's (401 otherwise, before
    the body is read; issue #23), then the body must be `application/json` (415). A
    well-formed StateChange is then answered 204 whether or not it was acted on (503 only when
    Redis fails); it never makes this handler connect to JMAP (reference §7.2)."""
    svc = services(request)
    try:
        with _push_errors():
            callback = await push.check_callback(svc.redis,
                                                 request.query_params.get(push.TOKEN_PARAM))
    except RedisError as exc:
        raise service_unavailable() from exc
    if not push.is_json(request.headers.get("content-type")):
        raise ApiError(415, "unsupported_media_type")
    body = await request.body()
    if len(body) > push.MAX_PUSH_BODY_BYTES:
        raise ApiError(413, "payload_too_large")
    with _push_errors():
        message = push.parse_push(json_object(body))
    if isinstance(message, push.StateChange):
        try:
            await push.accept_state_change(svc.redis, message, callback, svc.store.enabled,
                                           svc.live_jmap, now=time.time())
        except RedisError as exc:
            raise service_unavailable() from exc
        return Response(status_code=204)
    try:
        with _push_errors():
            await push.require_known_subscription(svc.redis, message)
    except RedisError as exc:
        raise service_unavailable() from exc
    await require_enabled(request)
    client = await _jmap(svc)
    with _push_errors():
        await push.verify(svc.redis, client, message, now=time.time())
    return Response(status_code=204)


@router.post("/api/push/register")
async def register_push(request: Request) -> JSONResponse:
    await require_admin(request)
    svc = services(request)
    body = json_object(await request.body())
    with _push_errors():
        url = push.callback_url_of(body, strict=True)
        result = await push.register(svc.redis, lambda: _jmap(svc), url,
                                     request.state.request_id, now=time.time())
    if not result.get("idempotent"):
        await audit.record_audit(svc, audit.PUSH_REGISTERED,
                                 subscription_id=result["push_subscription_id"])
    return JSONResponse(result)


@router.post("/api/push/disable")
async def disable_push(request: Request) -> JSONResponse:
    await require_admin(request)
    svc = services(request)
    body = json_object(await request.body())
    with _push_errors():
        url = push.callback_url_of(body, strict=False)
        result = await push.disable(svc.redis, lambda: _jmap(svc), url)
    await audit.record_audit(svc, audit.PUSH_DISABLED)
    return JSONResponse(result)


@router.get("/api/push/status")
async def push_status(request: Request) -> JSONResponse:
    """The push in force (`in_force`: EventSource or PushSubscription under `push_mode`), the
    PushSubscription lifecycle, and how Telegram's updates arrive (`updates`), as every instance
    sees them (read from Redis): for the admin page's callbacks card."""
    await require_admin(request)
    svc = services(request)
    now = time.time()
    try:
        force = await default_push(svc, now)
        updates = await read_label(svc)
    except RedisError as exc:
        raise service_unavailable() from exc
    health = force.subscription
    assert health is not None
    last = health.last_state_change
    return JSONResponse({
        "in_force": force.label,
        "way": force.way if force.state == "ok" else None,
        "push_mode": svc.config.config.push_mode if svc.config.config else None,
        "last_event_at": force.last_event,
        "last_event_age_s": None if force.last_event is None
        else max(0, int(now) - force.last_event),
        "updates": updates,
        "telegram_updates": (svc.config.config.telegram_updates if svc.config.config
                             else None),
        "state": health.state,
        "label": health.label,
        "reason": health.reason,
        "subscription_id": health.subscription_id,
        "verified": health.verified,
        "expires_at": health.expires,
        "expires_in_s": None if health.expires is None else health.expires - int(now),
        "last_state_change_at": last,
        "last_state_change_age_s": None if last is None else max(0, int(now) - last),
    })
