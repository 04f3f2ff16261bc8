"""JMAP push (SPEC B.10, C.1): registering the subscription, verifying it, reading pushes.

Nothing in a push body is trusted beyond "something changed": a StateChange only schedules a
catch-up reconcile from the stored Email state (Email/changes is the truth).

How a push is authenticated (there is no header auth on `/push/jmap`):
- `PushVerification`: its `pushSubscriptionId` must be a subscription we created and still track
  (else 401); the code is then checked by the JMAP server itself (PushSubscription/set update).
- `StateChange`: accepted only while a push registration exists (`push:registration:current`,
  else 401), and it acts only when `changed` names the configured account (else 403): then an
  `Email` (or `EmailDelivery`) entry schedules one coalesced catch-up.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from redis.exceptions import RedisError

from messageweave.errors import ApiError, conflict, invalid_request, unauthorized
from messageweave.mail.jmap import JmapClient, JmapError, JmapSetError
from messageweave.store import mailbox as store
from messageweave.store.redis import Redis
from messageweave.store.state import sha256_hex

log = logging.getLogger(__name__)

Connect = Callable[[], Awaitable[JmapClient]]
"""Returns the live JMAP client (raising an ApiError when there is none)."""

PUSH_TYPES = ("Email",)
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


async def verify(redis: Redis, client: JmapClient, push: Verification) -> None:
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
        await store.record_verified(redis, push.subscription_id, digest)
    except RedisError as exc:
        raise _unavailable("push_state_unavailable") from exc


async def require_known_subscription(redis: Redis, push: Verification) -> None:
    if not await store.is_known_subscription(redis, push.subscription_id):
        raise unauthorized()


async def require_registration(redis: Redis) -> None:
    if await store.current_registration(redis) is None:
        raise unauthorized()


async def state_changed(redis: Redis, account_id: str, push: StateChange) -> bool:
    """Schedule a catch-up when the change concerns our account's mail. True when one was
    newly scheduled (False: nothing to do, or one is already pending). 403 for another account."""
    types = push.changed.get(account_id)
    if types is None:
        raise ApiError(403, "forbidden")
    if not CATCHUP_TYPES & types.keys():
        return False
    return await store.request_catchup(redis, account_id)


# ---------------------------------------------------------------------------------- register


async def _destroy(client: JmapClient, subscription_id: str) -> bool:
    """Destroy a subscription; True when it is gone (also when the server no longer knows it)."""
    for _attempt in range(2):
        try:
            await client.push_subscription_destroy(subscription_id)
            return True
        except JmapSetError as exc:
            if exc.type == "notFound":
                return True
        except JmapError:
            pass
    return False


async def _destroy_or_orphan(
    redis: Redis, client: JmapClient, subscription_id: str, request_id: str
) -> None:
    if not await _destroy(client, subscription_id):
        log.warning("push subscription %s left as an orphan", subscription_id)
        await store.record_orphan(redis, subscription_id, request_id)


async def register(
    redis: Redis, connect: Connect, callback_url: str, request_id: str
) -> dict[str, Any]:
    """Single-flight per URL; idempotent; a new URL replaces the previous subscription."""
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
        except RedisError as exc:
            raise _unavailable("service_unavailable") from exc
        if existing is not None:
            return {"push_subscription_id": existing, "idempotent": True}
        client = await connect()
        if previous is not None and previous.url_digest != digest:
            try:
                await _destroy_or_orphan(redis, client, previous.subscription_id, request_id)
                await store.forget_registration(redis, previous)
            except RedisError as exc:
                raise _unavailable("push_state_unavailable") from exc
        try:
            await client.get_session()
            sub = await client.push_subscription_create(
                f"message-weave-{client.account_id}", callback_url, PUSH_TYPES
            )
        except JmapError as exc:
            log.warning("push subscription not created: %s", type(exc).__name__)
            raise _unavailable("service_unavailable") from exc
        try:
            await store.record_registration(redis, store.Registration(digest, sub.id))
        except RedisError as exc:
            await _destroy_or_orphan_quietly(redis, client, sub.id, request_id)
            raise _unavailable("push_state_unavailable") from exc
        return {"push_subscription_id": sub.id}
    finally:
        try:
            await lock.release()
        except RedisError:
            pass


async def _destroy_or_orphan_quietly(
    redis: Redis, client: JmapClient, subscription_id: str, request_id: str
) -> None:
    try:
        await _destroy_or_orphan(redis, client, subscription_id, request_id)
    except RedisError:
        log.error("push subscription %s could not be destroyed nor recorded", subscription_id)


async def disable(redis: Redis, connect: Connect, callback_url: str) -> dict[str, Any]:
    digest = sha256_hex(callback_url)
    try:
        sub_id = await store.registration_for(redis, digest)
    except RedisError:
        sub_id = None
    if sub_id is None:
        raise ApiError(404, "push_subscription_not_found")
    if not await _destroy(await connect(), sub_id):
        raise _unavailable("push_destroy_failed")  # mapping kept: the disable can be retried
    try:
        await store.forget_registration(redis, store.Registration(digest, sub_id))
    except RedisError as exc:
        raise _unavailable("push_state_unavailable") from exc
    return {"disabled": True}


async def sweep_orphans(redis: Redis, client: JmapClient) -> int:
    """Destroy every subscription recorded under `push:orphan:*`; the number cleaned up."""
    cleaned = 0
    for sub_id in await store.orphans(redis):
        if await _destroy(client, sub_id):
            await store.drop_orphan(redis, sub_id)
            cleaned += 1
    return cleaned
