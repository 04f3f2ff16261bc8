"""What a handler needs (`request.app.state.services`, a `messageweave.services.Services`), and
who may call it.

Every authenticated route starts with one `require_*` call naming the credential it accepts
(docs/security.md has the table). A request with no credential, or one that matches nothing,
is 401 `unauthorized`; a valid credential of another kind is 403 `forbidden`. Every failed
credential counts against the client's address (`messageweave.store.throttle`); while the
address is locked every authenticated route answers it 429 `rate_limited`, even for a correct
credential (a lock that let the right guess through would not stop guessing).
"""

from __future__ import annotations

import enum
import hmac
import logging
from dataclasses import dataclass

from fastapi import Request
from redis.exceptions import RedisError

from messageweave.api.gateway import is_signed
from messageweave.api.throttle import ClientAddressPolicy, client_of, rate_limited
from messageweave.config.account_service import AccountService
from messageweave.errors import ApiError, service_unavailable, unauthorized
from messageweave.ops import audit
from messageweave.services import Services
from messageweave.store import throttle
from messageweave.store.accounts import AccountStore

log = logging.getLogger(__name__)


def services(request: Request) -> Services:
    svc: Services = request.app.state.services
    return svc


SOCKET_PEER = ClientAddressPolicy()


def client_address(request: Request) -> ClientAddressPolicy:
    """Where the client address comes from (the socket peer unless a trusted proxy is named).
    With `GATEWAY_SECRET` the header is believed only on a request the gateway signed
    (`api.gateway`, which also signs the header's value): on any other it is the caller's own
    claim, and the socket peer is the client."""
    if services(request).settings.gateway_secret and not is_signed(request.scope):
        return SOCKET_PEER
    policy: ClientAddressPolicy = request.app.state.client_address
    return policy


def bearer(request: Request) -> str | None:
    """The token of an `Authorization: Bearer <token>` header (exact, case-sensitive prefix)."""
    header = request.headers.get("authorization", "")
    return header[len("Bearer "):] if header.startswith("Bearer ") else None


def constant_time_eq(actual: str | None, expected: str) -> bool:
    """False for an empty expected secret: an unset secret never authenticates."""
    if actual is None or not expected:
        return False
    return hmac.compare_digest(actual.encode(), expected.encode())


class Credential(enum.Enum):
    """The bearer credentials the service knows (the webhook secret travels in its own header
    and `DEBUG_TOKEN` guards only `/debug/*`, `require_debug_token`)."""

    ADMIN_KEY = "admin_key"  # CONFIG_ENCRYPTION_KEY itself: bootstrap, login, revoke
    ADMIN_SESSION = "admin_session"  # what `POST /api/admin/session` hands out
    WORKER_TOKEN = "worker_token"  # business config `worker_token`
    RECONCILE_TOKEN = "reconcile_token"  # business config `reconcile_token`
    # Issue #35: an account's owner. The key (`POST /api/accounts/{id}/owner-key`) opens owner
    # sessions only; a session opens its own account's GET/PUT and status, nothing else.
    OWNER_KEY = "owner_key"
    OWNER_SESSION = "owner_session"


@dataclass(frozen=True)
class Principal:
    """Who a request authenticated as: the kind of credential, and for an owner's the
    account it belongs to."""

    kind: Credential
    account: str | None = None


def forbidden() -> ApiError:
    return ApiError(403, "forbidden")


def accounts(svc: Services) -> AccountService:
    """The accounts of the deployment, read from (and written to) Redis on each call."""
    return AccountService(svc.config, AccountStore(svc.redis), svc.settings.encryption_key)


async def require_admin(request: Request) -> None:
    """An admin session: settings, webhook and push registration, DLQ, logs, audit, status."""
    await _authenticate(request, {Credential.ADMIN_SESSION})


async def require_worker_or_admin(request: Request) -> None:
    """The worker token or an admin session: the kill switch (`/api/enabled`) and `/metrics`."""
    await _authenticate(request, {Credential.WORKER_TOKEN, Credential.ADMIN_SESSION})


async def require_worker_token(request: Request) -> None:
    """`POST /worker`: the worker token only."""
    await _authenticate(request, {Credential.WORKER_TOKEN})


async def require_reconcile_token(request: Request) -> None:
    """`POST /reconcile`: the reconcile token only."""
    await _authenticate(request, {Credential.RECONCILE_TOKEN})


async def require_admin_key(request: Request) -> None:
    """The admin key itself: `POST /api/bootstrap` and `POST /api/admin/session` (login)."""
    await _authenticate(request, {Credential.ADMIN_KEY})


async def require_admin_or_owner(request: Request, account_id: str | None = None
                                 ) -> Principal:
    """An admin session, or an owner session: of `account_id` when named (another account's
    owner is 403 `forbidden`); else any owner, and the caller narrows what it shows."""
    principal = await _authenticate(request, {Credential.ADMIN_SESSION,
                                              Credential.OWNER_SESSION})
    if account_id is not None and principal.kind is Credential.OWNER_SESSION \
            and principal.account != account_id:
        raise forbidden()
    return principal


async def require_owner_key(request: Request) -> str:
    """`POST /api/owner/session`: an account's owner key only; the account's id."""
    principal = await _authenticate(request, {Credential.OWNER_KEY})
    assert principal.account is not None  # an owner key always names its account
    return principal.account


async def require_admin_key_or_session(request: Request) -> None:
    """`POST /api/admin/session/revoke`: the current session or the admin key (reference
    §3.1)."""
    await _authenticate(request, {Credential.ADMIN_KEY, Credential.ADMIN_SESSION})


async def shows_admin(request: Request, *, admin_key: bool = False) -> bool:
    """For a public route that tells the admin more (`/api/status`'s build, `/ready`'s
    reasons): True when the request carries a valid admin session, or with `admin_key` the
    admin key itself (`/ready`: the CLI, a monitoring script; issue #34), never for another
    credential or none. Never refuses (the route stays public), but obeys the throttle like
    every Bearer route: while the client is locked the answer is False even for a valid
    credential, and a credential that matches nothing is counted as a failure."""
    if not request.headers.get("authorization"):
        return False
    svc = services(request)
    client = client_of(request, client_address(request))
    try:
        await _refuse_if_locked(svc, client)
    except ApiError:
        return False
    token = bearer(request)
    if token is not None:
        for kind in sorted(Credential, key=lambda k: k is not Credential.ADMIN_SESSION):
            if await _principal(svc, kind, token) is not None:
                return kind is Credential.ADMIN_SESSION or (
                    admin_key and kind is Credential.ADMIN_KEY)
    await _count_failure(request, svc, client)
    return False


async def require_debug_token(request: Request) -> None:
    """`/debug/*`: `DEBUG_TOKEN` only, under the same throttle as every Bearer credential
    (issue #23): a locked client is 429 first, a token that does not match is counted."""
    svc = services(request)
    client = client_of(request, client_address(request))
    await _refuse_if_locked(svc, client)
    if constant_time_eq(bearer(request), svc.settings.debug_token):
        return
    if request.headers.get("authorization"):
        await _count_failure(request, svc, client)
    raise unauthorized()


async def _authenticate(request: Request, allowed: set[Credential]) -> Principal:
    svc = services(request)
    client = client_of(request, client_address(request))
    await _refuse_if_locked(svc, client)
    token = bearer(request)
    if token is not None:
        # The accepted kinds first: a token that is also another kind's (an operator who set
        # two tokens alike) still opens the routes it belongs to.
        for kind in sorted(Credential, key=lambda k: k not in allowed):
            principal = await _principal(svc, kind, token)
            if principal is not None:
                if kind in allowed:
                    return principal
                raise forbidden()
    if request.headers.get("authorization"):  # a credential was presented and matched nothing
        await _count_failure(request, svc, client)
    raise unauthorized()


async def _principal(svc: Services, kind: Credential, token: str) -> Principal | None:
    """Who `token` is as a credential of this kind, None when it is not one."""
    if kind in (Credential.OWNER_KEY, Credential.OWNER_SESSION):
        try:
            find = (accounts(svc).owner_key_account if kind is Credential.OWNER_KEY
                    else accounts(svc).owner_session_account)
            account = await find(token)
        except RedisError:  # as below: "not authorized", never a crash
            return None
        return None if account is None else Principal(kind, account)
    return Principal(kind) if await _matches(svc, kind, token) else None


async def _matches(svc: Services, kind: Credential, token: str) -> bool:
    cfg = svc.config.config
    if kind is Credential.ADMIN_KEY:
        return constant_time_eq(token, svc.settings.admin_key)
    if kind is Credential.WORKER_TOKEN:
        return cfg is not None and constant_time_eq(token, cfg.worker_token)
    if kind is Credential.RECONCILE_TOKEN:
        return cfg is not None and constant_time_eq(token, cfg.reconcile_token)
    try:
        return await svc.store.admin_session_valid(token, svc.settings.encryption_key)
    except RedisError:  # a Redis error counts as "not authorized", never as a crash
        return False


async def _refuse_if_locked(svc: Services, client: str) -> None:
    try:
        remaining = await throttle.locked_for(svc.redis, client)
    except RedisError:  # fail open: the credentials still decide, and /metrics must answer
        log.warning("throttle state unreadable; not throttling this request")
        return
    if remaining:
        raise rate_limited(remaining)


async def _count_failure(request: Request, svc: Services, client: str) -> None:
    try:
        lock_s = await throttle.record_failure(svc.redis, client)
    except RedisError:
        log.warning("failed credential not counted: Redis unavailable")
        return
    if lock_s:
        await audit.record_audit(svc, audit.AUTH_THROTTLED, client=client, lock_s=lock_s,
                                 method=request.method, path=request.url.path)


async def require_enabled(request: Request) -> None:
    """The global switch (`config:enabled`, off by default). Business routes call this *after*
    authenticating the caller, so the unauthenticated learn nothing (not even whether the
    switch is on)."""
    await ensure_enabled(services(request))


async def ensure_enabled(svc: Services) -> None:
    """`require_enabled` for a handler that has the services but no `Request`."""
    try:
        enabled = await svc.store.enabled()
    except RedisError as exc:
        raise service_unavailable() from exc
    if not enabled:
        raise service_unavailable()
