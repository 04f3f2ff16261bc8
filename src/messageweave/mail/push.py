"""JMAP push (RFC 8620 §7.2, reference §1.6 and §7.2): registering the subscription, verifying
it and reading pushes. Keeping it alive (the push lifecycle) is `push_lifecycle`; its public
names are importable from here too.

Every refusal or failure is a `PushError`, whose subclass says what went wrong and whose
`code` is the envelope code a client sees (reference §2); `api.mailbox` maps each subclass to
its HTTP status, so nothing here speaks HTTP.

Nothing in a push body is trusted beyond "something changed": a StateChange only schedules a
catch-up reconcile from the stored Email state (Email/changes is the truth).

How a push is authenticated (the JMAP server sends no header credential):
- First, always: the callback URL of every subscription we create carries a random token of
  its own (`?t=…`, `push_lifecycle.with_token`); only its SHA-256 is stored, in the lifecycle.
  A post without the current subscription's token is 401 before its body is read
  (`check_callback`, constant time; issue #23). So nothing below is reachable anonymously.
- `PushVerification`: its `pushSubscriptionId` must be a subscription we created and still track
  (else 401); the code is then checked by the JMAP server itself (PushSubscription/set update).
- `StateChange`: acted on only for a verified subscription, while the switch is on, the JMAP
  client is connected already (the handler never connects: no post can make us log in to the
  mail server) and `changed` names its account: then an `Email` (or `EmailDelivery`) entry asks
  for a catch-up, at most one per `PUSH_CATCHUP_INTERVAL_S` (a push inside the interval is
  deferred to its end, `release_deferred`). Whether it was acted on is not told to the sender:
  a well-formed StateChange with the token is answered 204 either way (reference §7.2).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from redis.exceptions import RedisError

from messageweave.mail.jmap import JmapClient, JmapError, UnknownMethod
from messageweave.mail.push_lifecycle import (
    PUSH_TYPES,
    REASONS,
    TOKEN_PARAM,
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
from messageweave.store import catchup, keys
from messageweave.store import push as store
from messageweave.store.config_store import sha256_hex
from messageweave.store.redis import Redis

__all__ = [
    "CATCHUP_TYPES",
    "MAX_PUSH_ACCOUNTS",
    "MAX_PUSH_BODY_BYTES",
    "PUSH_TYPES",
    "REASONS",
    "TOKEN_PARAM",
    "Clock",
    "Connect",
    "MaintenanceOutcome",
    "PushError",
    "PushHealth",
    "PushInvalid",
    "PushNotSupported",
    "PushState",
    "PushUnavailable",
    "RegistrationBusy",
    "StateChange",
    "SubscriptionNotFound",
    "UnknownCallback",
    "Verification",
    "VerifyRateLimited",
    "accept_state_change",
    "assess",
    "callback_url_of",
    "check_callback",
    "disable",
    "health",
    "is_json",
    "maintain",
    "parse_push",
    "register",
    "release_deferred",
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
"""Returns the live JMAP client; when there is none it raises what its caller answers with."""

Clock = Callable[[], float]
"""Unix seconds now (`time.time` in production; tests pass their own)."""

CATCHUP_TYPES = frozenset({"Email", "EmailDelivery"})
MAX_PUSH_BODY_BYTES = 64 * 1024
# A StateChange naming more accounts than this is refused (400): we have one account, and a
# JMAP user sees a few shared ones at most (issue #23: 2,600 guesses in 56 KB were read).
MAX_PUSH_ACCOUNTS = 32
# Compared when nothing is stored, so a missing registration takes as long as a wrong token.
_NO_TOKEN = "0" * 64


# ---------------------------------------------------------------------------------- errors


class PushError(Exception):
    """A push request refused or failed; `code` is the envelope code (reference §2)."""

    code = "service_unavailable"

    def __init__(self, code: str | None = None) -> None:
        super().__init__(code or self.code)
        if code is not None:
            self.code = code


class PushInvalid(PushError):
    """A body or callback URL that is not what the route takes (400)."""

    code = "invalid_request"


class UnknownCallback(PushError):
    """A post without the current subscription's token, or naming a subscription we do not
    track (401)."""

    code = "unauthorized"


class SubscriptionNotFound(PushError):
    """A disable for a callback URL with no registration (404)."""

    code = "push_subscription_not_found"


class RegistrationBusy(PushError):
    """The URL's register lock is held by a registration or a maintenance pass (409)."""

    code = "conflict"


class VerifyRateLimited(PushError):
    """A verification attempt inside the subscription's rate limit (429, retry)."""

    code = "push_verify_rate_limited"


class PushNotSupported(PushError):
    """The mail server has no PushSubscription/set (502: a retry cannot help)."""

    code = "push_not_supported"


class PushUnavailable(PushError):
    """Redis or the mail server failed (503, retry); `code` says which step
    (`push_state_unavailable`, `push_verify_failed`, `push_destroy_failed`,
    `service_unavailable`)."""


# ---------------------------------------------------------------------------------- bodies


@dataclass(frozen=True)
class Verification:
    subscription_id: str
    code: str


@dataclass(frozen=True)
class StateChange:
    changed: dict[str, dict[str, str]]


def parse_push(body: dict[str, Any]) -> Verification | StateChange:
    """An RFC 8620 §7.1/§7.2 push object, else `PushInvalid` (also a StateChange naming more
    than `MAX_PUSH_ACCOUNTS` accounts)."""
    kind = body.get("@type")
    if kind == "PushVerification":
        sub_id, code = body.get("pushSubscriptionId"), body.get("verificationCode")
        if isinstance(sub_id, str) and sub_id and isinstance(code, str) and code:
            return Verification(sub_id, code)
    elif kind == "StateChange":
        changed = body.get("changed")
        if isinstance(changed, dict) and len(changed) <= MAX_PUSH_ACCOUNTS and all(
            isinstance(account, str) and isinstance(types, dict)
            and all(isinstance(t, str) and isinstance(s, str) for t, s in types.items())
            for account, types in changed.items()
        ):
            return StateChange(changed)
    raise PushInvalid


def callback_url_of(body: dict[str, Any], *, strict: bool) -> str:
    """`callback_url`; with `strict`, it must be https with a host and no credentials."""
    url = body.get("callback_url")
    if not isinstance(url, str) or not url.strip():
        raise PushInvalid
    if strict:
        try:
            parts = urlsplit(url)
            valid = (parts.scheme == "https" and bool(parts.hostname)
                     and parts.username is None and parts.password is None)
        except ValueError:
            valid = False
        if not valid:
            raise PushInvalid
    return url


# ---------------------------------------------------------------------------------- pushes


async def check_callback(redis: Redis, token: str | None) -> store.Callback:
    """The first check of every post to `/push/jmap`: the token of its URL must be the current
    subscription's (SHA-256 compared in constant time), else `UnknownCallback` (no
    registration included).
    A RedisError propagates."""
    found = await store.callback(redis)
    given = sha256_hex(token) if token else ""
    matches = hmac.compare_digest(given.encode(), (found.token_digest or _NO_TOKEN).encode())
    if not matches or found.token_digest is None:
        raise UnknownCallback
    return found


def is_json(content_type: str | None) -> bool:
    """`application/json`, with or without parameters (`; charset=utf-8`). Anything else
    would let a web page post cross-site without a CORS preflight (issue #23)."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json"


async def verify(redis: Redis, client: JmapClient, push: Verification, *, now: float) -> None:
    """Complete a PushVerification: PushSubscription/set update, then store the code digest."""
    digest = sha256_hex(push.code)
    try:
        if await store.verified_digest(redis, push.subscription_id) == digest:
            return  # already verified with this code
        if not await store.claim_verify_slot(redis, push.subscription_id):
            raise VerifyRateLimited
    except RedisError as exc:
        raise PushUnavailable("push_state_unavailable") from exc
    try:
        await client.push_subscription_verify(push.subscription_id, push.code)
    except JmapError as exc:
        log.warning("push verification refused: %s", type(exc).__name__)
        raise PushUnavailable("push_verify_failed") from exc
    try:
        await store.record_verified(redis, push.subscription_id, digest, now=now)
    except RedisError as exc:
        raise PushUnavailable("push_state_unavailable") from exc


async def require_known_subscription(redis: Redis, push: Verification) -> None:
    if not await store.is_known_subscription(redis, push.subscription_id):
        raise UnknownCallback


async def accept_state_change(
    redis: Redis, push: StateChange, callback: store.Callback,
    enabled: Callable[[], Awaitable[bool]], client: JmapClient | None, *, now: float,
) -> bool:
    """Act on a StateChange that came with the subscription's token (`callback`, from
    `check_callback`) when that subscription is verified, the switch is on (`enabled`) and
    it names the account of `client`, the JMAP client already connected (None: the hint is
    dropped; never connect here, issue #23); else ignore it. True when a catch-up was newly
    scheduled. A RedisError propagates."""
    if not callback.verified:
        log.info("StateChange ignored: the subscription has not completed its verification")
        return False
    if not await enabled():
        return False
    if client is None or client.session is None:
        log.info("StateChange ignored: JMAP is not connected yet (the next pass reads it)")
        return False
    return await state_changed(redis, client.account_id, push, now=now)


async def state_changed(
    redis: Redis, account_id: str, push: StateChange, *, now: float
) -> bool:
    """Record the StateChange's arrival and ask for a catch-up when it concerns our account's
    mail, at most one per `PUSH_CATCHUP_INTERVAL_S` (`store.push.claim_push_catchup`: one
    inside the interval is deferred to its end). A newly scheduled one wakes the schedulers
    (`store.catchup.announce_catchup`) rather than waiting for their poll; a newly deferred one
    wakes this instance's at the interval's end (its tick releases it). True when one was
    newly scheduled (False: nothing to do, one is pending or deferred, or it names only other
    accounts: then nothing is recorded)."""
    types = push.changed.get(account_id)
    if types is None:
        log.info("StateChange ignored: it does not name the configured account")
        return False
    await store.record_state_change(redis, now)
    if not CATCHUP_TYPES & types.keys():
        return False
    claim = await store.claim_push_catchup(redis, account_id, now=now,
                                           interval=keys.PUSH_CATCHUP_INTERVAL_S)
    if claim.scheduled:
        await catchup.announce_catchup(redis, account_id)
    elif claim.deferred_until is not None:  # released by the first tick after its due time
        catchup.wake_local_schedulers(redis, after=claim.deferred_until - now)
    return claim.scheduled


async def release_deferred(redis: Redis, account_id: str, *, now: float) -> bool:
    """The scheduler's half of the coalescing: a push deferred within the interval becomes a
    catch-up once the interval has passed. True when one was flagged now."""
    return await store.release_deferred_catchup(redis, account_id, now=now,
                                                interval=keys.PUSH_CATCHUP_INTERVAL_S)


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
            raise RegistrationBusy
    except RedisError as exc:
        raise PushUnavailable() from exc
    try:
        try:
            existing = await store.registration_for(redis, digest)
            previous = await store.current_registration(redis)
            if existing is not None:
                await _remember_url(redis, store.Registration(digest, existing), callback_url)
        except RedisError as exc:
            raise PushUnavailable() from exc
        if existing is not None:
            return {"push_subscription_id": existing, "idempotent": True}
        client = await connect()
        if previous is not None and previous.url_digest != digest:
            await _replace_previous(redis, client, previous, request_id)
        try:
            created = await create_subscription(client, callback_url, now)
        except UnknownMethod as exc:  # Cyrus 3.6: no PushSubscription at all (issue #22)
            log.warning("push subscription not created: the mail server has no "
                        "PushSubscription/set")
            raise PushNotSupported from exc
        except JmapError as exc:
            log.warning("push subscription not created: %s", type(exc).__name__)
            raise PushUnavailable() from exc
        sub = created.subscription
        try:
            await store.record_registration(redis, store.Registration(digest, sub.id),
                                            url=callback_url, expires=unix_of(sub.expires),
                                            now=now, token_digest=created.token_digest)
        except RedisError as exc:
            await destroy_or_orphan_quietly(redis, client, sub.id, request_id)
            raise PushUnavailable("push_state_unavailable") from exc
        return {"push_subscription_id": sub.id}
    finally:
        await release_lock(lock)


async def _replace_previous(
    redis: Redis, client: JmapClient, previous: store.Registration, request_id: str
) -> None:
    """Destroy (or orphan) the registration of another URL and forget it, under that URL's
    lock too, so a maintenance pass cannot re-create it meanwhile (`RegistrationBusy` while
    one runs)."""
    lock = store.push_register_lock(redis, previous.url_digest)
    try:
        if not await lock.acquire():
            raise RegistrationBusy
        try:
            await destroy_or_orphan(redis, client, previous.subscription_id, request_id)
            await store.forget_registration(redis, previous)
        finally:
            await release_lock(lock)
    except RedisError as exc:
        raise PushUnavailable("push_state_unavailable") from exc


async def _remember_url(redis: Redis, reg: store.Registration, callback_url: str) -> None:
    """A registration recorded before the lifecycle existed has no URL to re-create from;
    registering the same URL again supplies it."""
    lc = await store.read_lifecycle(redis)
    if lc is not None and lc.registration == reg and lc.url is None:
        await store.update_lifecycle(redis, reg, {"url": callback_url})


async def disable(redis: Redis, connect: Connect, callback_url: str) -> dict[str, Any]:
    """Destroy the subscription and forget the registration. Holds the URL's register lock
    (`RegistrationBusy` while a registration or a maintenance pass holds it)."""
    digest = sha256_hex(callback_url)
    lock = store.push_register_lock(redis, digest)
    try:
        known = await store.registration_for(redis, digest) is not None
        if known and not await lock.acquire():
            raise RegistrationBusy
    except RedisError:
        known = False
    if not known:
        raise SubscriptionNotFound
    try:
        sub_id = await store.registration_for(redis, digest)  # again, now under the lock
        if sub_id is None:
            raise SubscriptionNotFound
        if not await destroy(await connect(), sub_id):
            raise PushUnavailable("push_destroy_failed")  # mapping kept: the disable can be retried
        await store.forget_registration(redis, store.Registration(digest, sub_id))
    except RedisError as exc:
        raise PushUnavailable("push_state_unavailable") from exc
    finally:
        await release_lock(lock)
    return {"disabled": True}
