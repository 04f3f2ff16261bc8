"""What a handler needs, reached through `request.app.state.services`."""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from fastapi import Request
from redis.exceptions import RedisError

from messageweave.config.service import ConfigService
from messageweave.errors import service_unavailable, unauthorized
from messageweave.settings import Settings
from messageweave.store.redis import Redis
from messageweave.store.state import ConfigStore


@dataclass
class Services:
    settings: Settings
    redis: Redis
    store: ConfigStore
    config: ConfigService
    version: str


def services(request: Request) -> Services:
    svc: Services = request.app.state.services
    return svc


def bearer(request: Request) -> str | None:
    """The token of an `Authorization: Bearer <token>` header (exact, case-sensitive prefix)."""
    header = request.headers.get("authorization", "")
    return header[len("Bearer "):] if header.startswith("Bearer ") else None


def constant_time_eq(actual: str | None, expected: str) -> bool:
    """False for an empty expected secret: an unset secret never authenticates."""
    if actual is None or not expected:
        return False
    return hmac.compare_digest(actual.encode(), expected.encode())


def require_admin_key(request: Request) -> None:
    """The CONFIG_ENCRYPTION_KEY itself as Bearer (bootstrap, session login)."""
    if not constant_time_eq(bearer(request), services(request).settings.admin_key):
        raise unauthorized()


async def config_authorized(request: Request) -> bool:
    """The worker token of the live configuration, or a valid admin session."""
    svc = services(request)
    token = bearer(request)
    if token is None:
        return False
    cfg = svc.config.config
    if cfg is not None and constant_time_eq(token, cfg.worker_token):
        return True
    try:
        return await svc.store.admin_session_valid(token)
    except RedisError:  # a Redis error counts as "not authorized", never as a crash
        return False


async def require_config_authorized(request: Request) -> None:
    if not await config_authorized(request):
        raise unauthorized()


async def require_enabled(request: Request) -> None:
    """The global switch (`config:enabled`, off by default). Business routes call this *after*
    authenticating the caller, so the unauthenticated learn nothing (SPEC C.7)."""
    try:
        enabled = await services(request).store.enabled()
    except RedisError as exc:
        raise service_unavailable() from exc
    if not enabled:
        raise service_unavailable()
