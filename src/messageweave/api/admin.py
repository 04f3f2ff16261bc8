"""Admin and configuration API (reference §3.1, §5.3-§5.5, §6)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from redis.exceptions import RedisError

from messageweave.api.credentials import (
    accounts,
    require_admin,
    require_admin_key,
    require_admin_key_or_session,
    require_worker_or_admin,
    services,
)
from messageweave.config.live import SaveResult, StoredConfigInvalid, StoreUnavailable
from messageweave.config.model import (
    SECRET_FIELDS,
    ConfigInvalid,
    WireError,
    empty_values,
    fill_generated_secrets,
)
from messageweave.config.outbound import parse_outbound, validate_outbound
from messageweave.errors import ApiError, conflict, invalid_request, service_unavailable
from messageweave.jsonio import check_json_depth, json_object, parse_json
from messageweave.ops import audit
from messageweave.store import keys
from messageweave.store.config_store import AlreadyConfigured, CorruptValue, RevisionConflict

router = APIRouter()

REVISION_HEADER = "x-business-config-revision"
# The validation message of a rejected configuration, for the admin page (the body stays the
# bare envelope).
CONFIG_ERROR_HEADER = "x-config-error"


def invalid_configuration(message: str | None = None) -> ApiError:
    # Printable ASCII only: a header value must hold no control character (no CR/LF).
    safe = message is not None and message.isascii() and message.isprintable()
    headers = {CONFIG_ERROR_HEADER: message} if message and safe else None
    return ApiError(422, "invalid_configuration", headers=headers)


# --- business configuration --------------------------------------------------------------


@contextmanager
def _save_errors() -> Iterator[None]:
    """The answers of a configuration write (`PUT /api/business-config`, bootstrap)."""
    try:
        yield
    except WireError as exc:
        raise invalid_configuration() from exc
    except ConfigInvalid as exc:
        raise invalid_configuration(str(exc)) from exc
    except (RevisionConflict, AlreadyConfigured) as exc:
        raise conflict() from exc
    except StoredConfigInvalid as exc:
        raise invalid_configuration() from exc
    except (StoreUnavailable, RedisError) as exc:
        raise service_unavailable() from exc


@router.get("/api/business-config")
async def get_business_config(request: Request) -> JSONResponse:
    await require_admin(request)
    svc = services(request)
    try:
        revision, cfg = await svc.config.read_stored()
    except StoreUnavailable as exc:
        raise service_unavailable() from exc
    except StoredConfigInvalid as exc:
        raise invalid_configuration() from exc
    if cfg is None:
        body: dict[str, Any] = {
            "configured": False,
            "revision": revision,
            "values": empty_values(),
            "secrets_present": dict.fromkeys(SECRET_FIELDS, False),
        }
    else:
        body = {"configured": True, "revision": revision, "values": cfg.values(),
                "secrets_present": cfg.secrets_present()}
    return JSONResponse(body, headers={REVISION_HEADER: str(revision)})


def _save_response(
    result: SaveResult, *, with_revision: bool, generated: dict[str, str] | None = None
) -> JSONResponse:
    body: dict[str, Any] = {"persisted": True}
    if with_revision:
        body["revision"] = result.revision
    body["runtime_applied"] = result.runtime_applied
    body["warnings"] = [w.to_json() for w in result.warnings]
    if generated is not None:
        body["generated"] = generated
    return JSONResponse(body, headers={REVISION_HEADER: str(result.revision)})


@router.put("/api/business-config")
async def put_business_config(request: Request) -> JSONResponse:
    await require_admin(request)
    body = parse_json(await request.body())
    svc = services(request)
    with _save_errors():
        await accounts(svc).check_business_patch(body)  # SPEC G.2: a chat, one account
        result = await svc.config.save_patch(body)
    # A first save that left out the shared secrets got them generated (issue #34): named in
    # the audit with the rest, their values only in this answer.
    named = {**body, **result.generated}
    await audit.record_audit(svc, audit.CONFIG_SAVED, fields=audit.changed_fields(named),
                             revision=result.revision)
    if not result.generated:
        return _save_response(result, with_revision=True)
    response = _save_response(result, with_revision=True, generated=result.generated)
    response.headers["Cache-Control"] = "no-store"
    return response


@router.post("/api/business-config/preflight")
async def preflight_business_config(request: Request) -> JSONResponse:
    await require_admin(request)
    body = await request.body()
    check_json_depth(body)  # too deep is a 400 as on every route; other bad JSON is reported
    try:
        result = await services(request).config.preflight(body)
    except StoreUnavailable as exc:
        raise service_unavailable() from exc
    except StoredConfigInvalid as exc:
        raise invalid_configuration() from exc
    return JSONResponse(result)


@router.post("/api/bootstrap")
async def bootstrap(request: Request) -> JSONResponse:
    await require_admin_key(request)
    # The caller holds the admin key, which already grants every secret: the shared secrets
    # it left out are generated here and shown in this answer, once.
    body, generated = fill_generated_secrets(parse_json(await request.body()))
    with _save_errors():
        result = await services(request).config.bootstrap(body)
    await audit.record_audit(services(request), audit.CONFIG_BOOTSTRAPPED,
                             fields=audit.changed_fields(body), revision=result.revision)
    response = _save_response(result, with_revision=False, generated=generated)
    response.headers["Cache-Control"] = "no-store"
    return response


# --- admin session -----------------------------------------------------------------------


@router.post("/api/admin/session")
async def create_admin_session(request: Request) -> JSONResponse:
    await require_admin_key(request)
    token = secrets.token_hex(32)
    try:
        svc = services(request)
        await svc.store.put_admin_session(token, svc.settings.encryption_key)
    except RedisError as exc:
        raise service_unavailable() from exc
    await audit.record_audit(services(request), audit.SESSION_CREATED)
    return JSONResponse({"session": token, "expires_in": keys.ADMIN_SESSION_TTL_S})


@router.post("/api/admin/session/revoke", status_code=204)
async def revoke_admin_session(request: Request) -> Response:
    """Needs the current session or the admin key (reference §3.1), then ends the session:
    a session can end itself, and the key holder can end it without signing in."""
    await require_admin_key_or_session(request)
    svc = services(request)
    try:
        await svc.store.revoke_admin_session()
    except RedisError as exc:
        raise service_unavailable() from exc
    await audit.record_audit(svc, audit.SESSION_REVOKED)
    return Response(status_code=204)


# --- switches and runtime parameters -----------------------------------------------------


@router.get("/api/enabled")
async def get_enabled(request: Request) -> JSONResponse:
    await require_worker_or_admin(request)
    try:
        enabled = await services(request).store.enabled()
    except RedisError:
        enabled = False
    return JSONResponse({"enabled": enabled})


@router.put("/api/enabled")
async def put_enabled(request: Request) -> JSONResponse:
    await require_worker_or_admin(request)
    body = json_object(await request.body())
    enabled = body.get("enabled")
    if not isinstance(enabled, bool):
        raise invalid_configuration("enabled must be a boolean")
    try:
        await services(request).store.set_enabled(enabled)
    except RedisError as exc:
        raise service_unavailable() from exc
    await audit.record_audit(services(request), audit.ENABLED_CHANGED, enabled=enabled)
    return JSONResponse({"enabled": enabled})


@router.get("/api/config")
async def get_config(request: Request) -> JSONResponse:
    await require_admin(request)
    try:
        outbound = await services(request).config.read_outbound()
    except (RedisError, CorruptValue) as exc:
        raise service_unavailable() from exc
    return JSONResponse(outbound.to_json())


@router.put("/api/config")
async def put_config(request: Request) -> JSONResponse:
    await require_admin(request)
    body = parse_json(await request.body())
    try:
        outbound = parse_outbound(body)
    except WireError as exc:
        raise invalid_request() from exc
    try:
        validate_outbound(outbound)
    except ConfigInvalid as exc:
        raise invalid_configuration(str(exc)) from exc
    svc = services(request)
    try:
        await svc.store.set_outbound(outbound.to_json())
    except RedisError as exc:
        raise service_unavailable() from exc
    svc.config.outbound = outbound
    await audit.record_audit(svc, audit.OUTBOUND_CHANGED, **outbound.to_json())
    return JSONResponse(outbound.to_json())
