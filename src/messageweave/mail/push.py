"""JMAP push (SPEC B.10, C.1): registering the subscription, verifying it and reading pushes.
Keeping it alive (the push lifecycle, docs/reference.md §7.2) is `push_lifecycle`; its public
names are importable from here too.

Nothing in a push body is trusted beyond "something changed": a StateChange only schedules a
catch-up reconcile from the stored Email state (Email/changes is the truth).

How a push is authenticated (there is no header auth on `/push/jmap`):
- `PushVerification`: its `pushSubscriptionId` must be a subscription we created and still track
  (else 401); the code is then checked by the JMAP server itself (PushSubscription/set update).
- `StateChange`: acted on only while a push registration exists (`push:registration:current`),
  the switch is on and `changed` names the configured account: then an `Email` (or
  `EmailDelivery`) entry schedules one coalesced catch-up. Whether it was acted on is never
  told to the sender (every well-formed StateChange is answered 204), so an unauthenticated
  caller cannot guess the account id, nor learn whether push is registered (reference §7.2).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from redis.exceptions import RedisError

from messageweave.errors import ApiError, conflict, invalid_request, unauthorized
from messageweave.mail.jmap import JmapClient, JmapError, UnknownMethod
from messageweave.mail.push_lifecycle import (
    PUSH_TYPES,
    REASONS,
    MaintenanceOutcome,
    PushHealth,
    PushState,
    assess,
    create_subscription,
    destroy,
    destroy_or_orphan,
    destroy_or_orphan_quietly,
    health,
    maintain,
    release_lock,
    renewal_due,
    sweep_orphans,
    unix_of,
    utc_date,
)
from messageweave.store import mailbox
from messageweave.store import push as store
from messageweave.store.redis import Redis
from messageweave.store.state import sha256_hex

__all__ = [
    "CATCHUP_TYPES",
    "MAX_PUSH_BODY_BYTES",
    "PUSH_TYPES",
    "REASONS",
    "Clock",
    "Connect",
    "MaintenanceOutcome",
    "PushHealth",
    "PushState",
    "StateChange",
    "Verification",
    "accept_state_change",
    "assess",
    "callback_url_of",
    "disable",
    "health",
    "maintain",
    "parse_push",
    "register",
    "renewal_due",
    "require_known_subscription",
    "state_changed",
    "sweep_orphans",
    "unix_of",
    "utc_date",
    "verify",
]

log = logging.getLogger(__name__)

Connect = Callable[[], Awaitable[JmapClient]]
"""Returns the live JMAP client (raising an ApiError when there is none)."""

Clock = Callable[[], float]
"""Unix seconds now (`time.time` in production; tests pass their own)."""

CATCHUP_TYPES = frozenset({"Email", "EmailDelivery"})
MAX_PUSH_BODY_BYTES = 64 * 1024


def _unavailable(code: str) -> ApiError:
    return ApiError(503, code, retry=True)


# ---------------------------------------------------------------------------------- bodies


@dataclass(frozen=True)
class Verification:
    subscription_id: str
    code: str


@dataclass(frozen=True)
class StateChange:
    changed: dict[str, dict[str, str]]


def parse_push(body: dict[str, Any]) -> Verification | StateChange:
    """An RFC 8620 §7.1/§7.2 push object, else 400 invalid_request."""
    kind = body.get("@type")
    if kind == "PushVerification":
        sub_id, code = body.get("pushSubscriptionId"), body.get("verificationCode")
        if isinstance(sub_id, str) and sub_id and isinstance(code, str) and code:
            return Verification(sub_id, code)
    elif kind == "StateChange":
        changed = body.get("changed")
        if isinstance(changed, dict) and all(
            isinstance(account, str) and isinstance(types, dict)
            and all(isinstance(t, str) and isinstance(s, str) for t, s in types.items())
            for account, types in changed.items()
        ):
            return StateChange(changed)
    raise invalid_request()


def callback_url_of(body: dict[str, Any], *, strict: bool) -> str:
    """`callback_url`; with `strict`, it must be https with a host and no credentials."""
    url = body.get("callback_url")
    if not isinstance(url, str) or not url.strip():
        raise invalid_request()
    if strict:
        try:
            parts = urlsplit(url)
            valid = (parts.scheme == "https" and bool(parts.hostname)
                     and parts.username is None and parts.password is None)
        except ValueError:
            valid = False
        if not valid:
            raise invalid_request()
    return url


# ---------------------------------------------------------------------------------- pushes


async def verify(redis: Redis, client: JmapClient, push: Verification, *, now: float) -> None:
    """Complete a PushVerification: PushSubscription/set update, then store the code digest."""
    digest = sha256_hex(push.code)
    try:
        if await store.verified_digest(redis, push.subscription_id) == digest:
            return  # already verified with this code
        if not await store.claim_verify_slot(redis, push.subscription_id):
            raise ApiError(429, "push_verify_rate_limited", retry=True)
    except RedisError as exc:
        raise _unavailable("push_state_unavailable") from exc
    try:
        await client.push_subscription_verify(push.subscription_id, push.code)
    except JmapError as exc:
        log.warning("push verification refused: %s", type(exc).__name__)
        raise _unavailable("push_verify_failed") from exc
    try:
        await store.record_verified(redis, push.subscription_id, digest, now=now)
    except RedisError as exc:
        raise _unavailable("push_state_unavailable") from exc


async def require_known_subscription(redis: Redis, push: Verification) -> None:
    if not await store.is_known_subscription(redis, push.subscription_id):
        raise unauthorized()


async def accept_state_change(
    redis: Redis, push: StateChange, enabled: Callable[[], Awaitable[bool]], connect: Connect,
    *, now: float,
) -> bool:
    """Act on a StateChange when a registration exists, the switch is on (`enabled`) and it
    names the account of the live JMAP client (`connect`); else ignore it. True when a
    catch-up was newly scheduled. Never says why not: the caller answers the same either way
    (no oracle). A RedisError propagates (the one failure every caller sees alike)."""
    if await store.current_registration(redis) is None or not await enabled():
        return False
    try:
        client = await connect()
    except ApiError:
        log.warning("StateChange ignored: no JMAP client to name our account")
        return False
    return await state_changed(redis, client.account_id, push, now=now)


async def state_changed(
    redis: Redis, account_id: str, push: StateChange, *, now: float
) -> bool:
    """Record the StateChange's arrival and schedule a catch-up when it concerns our account's
    mail; a newly scheduled one wakes the schedulers (`store.mailbox.announce_catchup`) rather than
    waiting for their poll. True when one was newly scheduled (False: nothing to do, one is
    already pending, or it names only other accounts: then nothing is recorded)."""
    types = push.changed.get(account_id)
    if types is None:
        log.info("StateChange ignored: it does not name the configured account")
        return False
    await store.record_state_change(redis, now)
    if not CATCHUP_TYPES & types.keys():
        return False
    if not await mailbox.request_catchup(redis, account_id):
        return False  # pending: its announcement is still to be acted on, or the poll takes it
    await mailbox.announce_catchup(redis, account_id)
    return True


# ---------------------------------------------------------------------------------- register


async def register(
    redis: Redis, connect: Connect, callback_url: str, request_id: str, *, now: float
) -> dict[str, Any]:
    """Single-flight per URL; idempotent; a new URL replaces the previous subscription. The
    subscription asks for `expires` = now + `PUSH_SUBSCRIPTION_LIFETIME_S`; the lifecycle keeps
    the callback URL (never a credential: `callback_url_of(strict=True)` refused those) so a
    lost subscription can be re-created."""
    digest = sha256_hex(callback_url)
    lock = store.push_register_lock(redis, digest)
    try:
        if not await lock.acquire():
            raise conflict()
    except RedisError as exc:
        raise _unavailable("service_unavailable") from exc
    try:
        try:
            existing = await store.registration_for(redis, digest)
            previous = await store.current_registration(redis)
            if existing is not None:
                await _remember_url(redis, store.Registration(digest, existing), callback_url)
        except RedisError as exc:
            raise _unavailable("service_unavailable") from exc
        if existing is not None:
            return {"push_subscription_id": existing, "idempotent": True}
        client = await connect()
        if previous is not None and previous.url_digest != digest:
            await _replace_previous(redis, client, previous, request_id)
        try:
            sub = await create_subscription(client, callback_url, now)
        except UnknownMethod as exc:  # Cyrus 3.6: no PushSubscription at all (issue #22)
            log.warning("push subscription not created: the mail server has no "
                        "PushSubscription/set")
            raise ApiError(502, "push_not_supported") from exc
        except JmapError as exc:
            log.warning("push subscription not created: %s", type(exc).__name__)
            raise _unavailable("service_unavailable") from exc
        try:
            await store.record_registration(redis, store.Registration(digest, sub.id),
                                            url=callback_url, expires=unix_of(sub.expires),
                                            now=now)
        except RedisError as exc:
            await destroy_or_orphan_quietly(redis, client, sub.id, request_id)
            raise _unavailable("push_state_unavailable") from exc
        return {"push_subscription_id": sub.id}
    finally:
        await release_lock(lock)


async def _replace_previous(
    redis: Redis, client: JmapClient, previous: store.Registration, request_id: str
) -> None:
    """Destroy (or orphan) the registration of another URL and forget it, under that URL's
    lock too, so a maintenance pass cannot re-create it meanwhile (409 while one runs)."""
    lock = store.push_register_lock(redis, previous.url_digest)
    try:
        if not await lock.acquire():
            raise conflict()
        try:
            await destroy_or_orphan(redis, client, previous.subscription_id, request_id)
            await store.forget_registration(redis, previous)
        finally:
            await release_lock(lock)
    except RedisError as exc:
        raise _unavailable("push_state_unavailable") from exc


async def _remember_url(redis: Redis, reg: store.Registration, callback_url: str) -> None:
    """A registration recorded before the lifecycle existed has no URL to re-create from;
    registering the same URL again supplies it."""
    lc = await store.read_lifecycle(redis)
    if lc is not None and lc.registration == reg and lc.url is None:
        await store.update_lifecycle(redis, reg, {"url": callback_url})


async def disable(redis: Redis, connect: Connect, callback_url: str) -> dict[str, Any]:
    """Destroy the subscription and forget the registration. Holds the URL's register lock
    (409 while a registration or a maintenance pass holds it)."""
    digest = sha256_hex(callback_url)
    lock = store.push_register_lock(redis, digest)
    try:
        known = await store.registration_for(redis, digest) is not None
        if known and not await lock.acquire():
            raise conflict()
    except RedisError:
        known = False
    if not known:
        raise ApiError(404, "push_subscription_not_found")
    try:
        sub_id = await store.registration_for(redis, digest)  # again, now under the lock
        if sub_id is None:
            raise ApiError(404, "push_subscription_not_found")
        if not await destroy(await connect(), sub_id):
            raise _unavailable("push_destroy_failed")  # mapping kept: the disable can be retried
        await store.forget_registration(redis, store.Registration(digest, sub_id))
    except RedisError as exc:
        raise _unavailable("push_state_unavailable") from exc
    finally:
        await release_lock(lock)
    return {"disabled": True}
