"""The accounts of one deployment (issue #35, SPEC G.3; reference §3.1, §5.8).

Every route needs an admin session, except that an account's owner session may read and change
its own account (`GET`/`PUT /api/accounts/{id}`, `GET /api/accounts/{id}/status`) and list it,
and `POST /api/owner/session` takes an owner key; `POST /api/owner/session/revoke` ends an owner
session (the caller's own, or with an admin session every one of an account). Every
`/api/accounts/{id}…` route answers an unknown id 404 `not_found`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from redis.exceptions import RedisError

from messageweave.api.account_status import account_status
from messageweave.api.admin import invalid_configuration
from messageweave.api.credentials import (
    Credential,
    accounts,
    bearer,
    forbidden,
    require_admin,
    require_admin_or_owner,
    require_owner_key,
    services,
)
from messageweave.config.account_service import (
    NOT_SERVED,
    AccountSave,
    NoBusinessConfig,
    UnknownAccount,
)
from messageweave.config.errors import ConfigInvalid, WireError
from messageweave.config.live import StoredConfigInvalid, StoreUnavailable
from messageweave.errors import ApiError, conflict, invalid_request, service_unavailable
from messageweave.jsonio import json_object, parse_json
from messageweave.mail.context import MailContext
from messageweave.ops import audit
from messageweave.services import Services
from messageweave.services.acting import AccountNotLoaded, AccountPaused, acting_mailbox
from messageweave.store.accounts import (
    AccountBeingDeleted,
    AccountExists,
    AccountGone,
    AccountRevisionConflict,
)
from messageweave.store.config_store import RevisionConflict
from messageweave.store.keys import DEFAULT_ACCOUNT, OWNER_SESSION_TTL_S

router = APIRouter()

# The audit records of these routes (`ops.audit.record_audit`, reference §1.7).
ACCOUNT_CREATED = "account_created"
ACCOUNT_SAVED = "account_saved"
ACCOUNT_DELETED = "account_deleted"
ACCOUNT_ENABLED_CHANGED = "account_enabled_changed"
OWNER_KEY_CREATED = "owner_key_created"
OWNER_SESSION_CREATED = "owner_session_created"
OWNER_SESSION_REVOKED = "owner_session_revoked"


def not_found() -> ApiError:
    return ApiError(404, "not_found")


@contextmanager
def _answers() -> Iterator[None]:
    """The answers of every account route: the envelope of SPEC G.3 for each failure."""
    try:
        yield
    except (WireError, ConfigInvalid) as exc:
        raise invalid_configuration(str(exc)) from exc
    except (UnknownAccount, AccountGone) as exc:
        raise not_found() from exc
    except AccountBeingDeleted as exc:  # its tombstone stands: try again after it (§1.12)
        raise ApiError(409, "conflict",
                       headers={"Retry-After": str(exc.retry_after_s)}) from exc
    except (NoBusinessConfig, AccountExists, AccountRevisionConflict, RevisionConflict,
            AccountPaused) as exc:
        raise conflict() from exc
    except StoredConfigInvalid as exc:
        raise invalid_configuration() from exc
    except (StoreUnavailable, RedisError, AccountNotLoaded) as exc:
        raise service_unavailable() from exc


def _account_id(request: Request) -> str:
    account_id: str = request.path_params["id"]
    return account_id


async def _saved(svc: Services, account_id: str, result: AccountSave,
                 **extra: object) -> dict[str, object]:
    """The answer to a save; another account's is applied once the runtime has rebuilt it
    (`AccountRegistry.applied`: no I/O to its mail server, reference §7.16)."""
    if account_id != DEFAULT_ACCOUNT and await svc.accounts.applied(account_id,
                                                                     result.revision):
        result = AccountSave(result.revision, True,
                             [w for w in result.warnings if w is not NOT_SERVED])
    return {**extra, "revision": result.revision, "runtime_applied": result.runtime_applied,
            "warnings": [w.to_json() for w in result.warnings]}


@router.get("/api/accounts")
async def list_accounts(request: Request) -> JSONResponse:
    principal = await require_admin_or_owner(request)
    with _answers():
        found = await accounts(services(request)).every()
    if principal.kind is Credential.OWNER_SESSION:
        found = [a for a in found if a.id == principal.account]
    return JSONResponse({"accounts": [a.to_json() for a in found]})


@router.post("/api/accounts", status_code=201)
async def create_account(request: Request) -> JSONResponse:
    await require_admin(request)
    body = parse_json(await request.body())
    svc = services(request)
    with _answers():
        account_id, result = await accounts(svc).create(body)
    await audit.record_audit(svc, ACCOUNT_CREATED, account=account_id,
                             fields=audit.changed_fields(body), revision=result.revision)
    return JSONResponse(await _saved(svc, account_id, result, id=account_id),
                        status_code=201)


@router.get("/api/accounts/{id}")
async def get_account(request: Request) -> JSONResponse:
    account_id = _account_id(request)
    await require_admin_or_owner(request, account_id)
    with _answers():
        account = await accounts(services(request)).get(account_id)
    return JSONResponse(account.to_json())


@router.put("/api/accounts/{id}")
async def put_account(request: Request) -> JSONResponse:
    account_id = _account_id(request)
    principal = await require_admin_or_owner(request, account_id)
    body = parse_json(await request.body())
    svc = services(request)
    with _answers():
        result = await accounts(svc).update(account_id, body)
    await audit.record_audit(svc, ACCOUNT_SAVED, account=account_id,
                             by=principal.kind.value, fields=audit.changed_fields(body),
                             revision=result.revision)
    return JSONResponse(await _saved(svc, account_id, result))


@router.delete("/api/accounts/{id}", status_code=204)
async def delete_account(request: Request) -> Response:
    account_id = _account_id(request)
    await require_admin(request)
    svc = services(request)
    with _answers():
        if account_id == DEFAULT_ACCOUNT:
            await accounts(svc).get(account_id)  # 404 before anything is stored
            raise conflict()
        await accounts(svc).delete(account_id)
    await audit.record_audit(svc, ACCOUNT_DELETED, account=account_id)
    return Response(status_code=204)


@router.put("/api/accounts/{id}/enabled")
async def put_account_enabled(request: Request) -> JSONResponse:
    account_id = _account_id(request)
    await require_admin(request)
    enabled = json_object(await request.body()).get("enabled")
    if not isinstance(enabled, bool):
        raise invalid_configuration("enabled must be a boolean")
    svc = services(request)
    with _answers():
        await accounts(svc).set_enabled(account_id, enabled)
    await audit.record_audit(svc, ACCOUNT_ENABLED_CHANGED, account=account_id, enabled=enabled)
    return JSONResponse({"enabled": enabled})


@router.get("/api/accounts/{id}/status")
async def get_account_status(request: Request) -> JSONResponse:
    account_id = _account_id(request)
    await require_admin_or_owner(request, account_id)
    svc = services(request)
    with _answers():
        account = await accounts(svc).get(account_id)
        return JSONResponse(await account_status(request, account))


@router.post("/api/accounts/{id}/owner-key")
async def post_owner_key(request: Request) -> JSONResponse:
    account_id = _account_id(request)
    await require_admin(request)
    svc = services(request)
    with _answers():
        owner_key = await accounts(svc).new_owner_key(account_id)
    await audit.record_audit(svc, OWNER_KEY_CREATED, account=account_id)
    return JSONResponse({"owner_key": owner_key})


@router.post("/api/owner/session")
async def create_owner_session(request: Request) -> JSONResponse:
    account_id = await require_owner_key(request)
    owner_key = (request.headers.get("authorization") or "")[len("Bearer "):]
    svc = services(request)
    with _answers():
        session = await accounts(svc).open_owner_session(account_id, owner_key)
    await audit.record_audit(svc, OWNER_SESSION_CREATED, account=account_id)
    return JSONResponse({"session": session, "expires_in": OWNER_SESSION_TTL_S,
                         "account": account_id})


@router.post("/api/owner/session/revoke", status_code=204)
async def revoke_owner_session(request: Request) -> Response:
    """An owner's sign-out: an owner session ends itself (the account's other sessions, a
    family's other phones, stay). An admin session ends every session of `{"account"}`'s owner
    (a lost phone) and keeps the owner key (reference §3.1)."""
    principal = await require_admin_or_owner(request)
    body = await request.body()
    named = json_object(body).get("account") if body.strip() else None
    svc = services(request)
    with _answers():
        if principal.kind is Credential.OWNER_SESSION:
            if named is not None and named != principal.account:
                raise forbidden()
            account_id = str(principal.account)
            await accounts(svc).end_owner_session(account_id, str(bearer(request)))
        else:
            if not isinstance(named, str):
                raise invalid_request()
            account_id = named
            await accounts(svc).end_owner_sessions(account_id)
    await audit.record_audit(svc, OWNER_SESSION_REVOKED, account=account_id,
                             by=principal.kind.value)
    return Response(status_code=204)


async def acting_account(request: Request, *, mailbox: bool) -> MailContext:
    """The mailbox `?account=` names on the admin routes that act on one mailbox (SPEC G.3):
    absent = `default`; an unknown id → 404 `not_found`; with `mailbox` (the route talks to the
    mail server) a paused account → 409 `conflict` (`services.acting`, reference §7.16).
    Called after the route authenticated its caller."""
    svc = services(request)
    with _answers():
        account_id = await accounts(svc).served(request.query_params.get("account"))
        return await acting_mailbox(svc, account_id, mailbox=mailbox)
