"""JMAP push (SPEC B.10, C.1): registering the subscription, verifying it, reading pushes,
and keeping it alive (the push lifecycle, docs/reference.md §7).

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

The lifecycle: a subscription is created with an explicit `expires` (now + 7 days; the server
may grant less) and `maintain` (run by the scheduler once a minute, cluster-wide) checks it with
PushSubscription/get, extends it when less than a third of its granted lifetime remains, and
re-creates it from the stored callback URL when the server lost or refused it. `assess` turns
what is stored into `ok`, `degraded: <reason>` or `off`. Every function takes the time as a
parameter (`now`), so tests drive expiry without sleeping.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import urlsplit

from redis.exceptions import RedisError

from messageweave.errors import ApiError, conflict, invalid_request, unauthorized
from messageweave.mail.jmap import JmapClient, JmapError, JmapSetError
from messageweave.store import keys
from messageweave.store import mailbox as store
from messageweave.store.redis import Redis
from messageweave.store.state import sha256_hex

log = logging.getLogger(__name__)

Connect = Callable[[], Awaitable[JmapClient]]
"""Returns the live JMAP client (raising an ApiError when there is none)."""

Clock = Callable[[], float]
"""Unix seconds now (`time.time` in production; tests pass their own)."""

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


# ---------------------------------------------------------------------------------- time


def utc_date(unix_s: float) -> str:
    """RFC 8620 UTCDate (`2030-01-01T00:00:00Z`) of a Unix time."""
    return datetime.fromtimestamp(int(unix_s), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def unix_of(value: str | None) -> int | None:
    """Unix seconds of an RFC 3339 date-time (None when absent or unreadable)."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp())


# ---------------------------------------------------------------------------------- health

PushState = Literal["ok", "degraded", "off"]

# Why push is degraded: code → the text `/ready` and `diagnose` show after "degraded: ".
REASONS = {
    "expired": "subscription expired",
    "not_verified": "subscription not verified in time",
    "check_failed": "server check failed",
    "renewal_failed": "renewal failed",
    "recreate_failed": "subscription lost, re-create failed",
    "url_unknown": "subscription lost, callback URL unknown",
}


@dataclass(frozen=True)
class PushHealth:
    state: PushState
    reason: str | None = None  # a key of REASONS while degraded
    subscription_id: str | None = None
    verified: bool = False
    expires: int | None = None  # Unix seconds; None = no expiry known
    last_state_change: int | None = None  # Unix seconds of the last accepted StateChange

    @property
    def label(self) -> str:
        """`ok`, `off` or `degraded: <reason>`."""
        if self.state == "degraded":
            return f"degraded: {REASONS.get(self.reason or '', self.reason)}"
        return self.state


def assess(lc: store.Lifecycle | None, now: float, last_state_change: int | None = None
           ) -> PushHealth:
    """Push health from what is stored: `off` without a registration; `degraded` when the last
    maintenance pass failed, the subscription expired, or it is still unverified
    `PUSH_VERIFY_DEADLINE_S` after its create; else `ok`."""
    if lc is None:
        return PushHealth("off", last_state_change=last_state_change)
    reason: str | None = None
    if lc.failure is not None:
        reason = lc.failure
    elif lc.expires is not None and lc.expires <= now:
        reason = "expired"
    elif (lc.verified is None and lc.created is not None
          and now - lc.created > keys.PUSH_VERIFY_DEADLINE_S):
        reason = "not_verified"
    return PushHealth(
        "degraded" if reason else "ok", reason, lc.registration.subscription_id,
        verified=lc.verified is not None, expires=lc.expires,
        last_state_change=last_state_change,
    )


async def health(redis: Redis, now: float) -> PushHealth:
    """The push health every instance reads the same way (from Redis)."""
    lc = await store.read_lifecycle(redis)
    return assess(lc, now, await store.last_state_change(redis))


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
    mail. True when one was newly scheduled (False: nothing to do, one is already pending, or
    it names only other accounts: then nothing is recorded)."""
    types = push.changed.get(account_id)
    if types is None:
        log.info("StateChange ignored: it does not name the configured account")
        return False
    await store.record_state_change(redis, now)
    if not CATCHUP_TYPES & types.keys():
        return False
    return await store.request_catchup(redis, account_id)


# ---------------------------------------------------------------------------------- register


def _device_client_id(client: JmapClient) -> str:
    return f"message-weave-{client.account_id}"


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


async def _destroy_or_orphan_quietly(
    redis: Redis, client: JmapClient, subscription_id: str, request_id: str
) -> None:
    try:
        await _destroy_or_orphan(redis, client, subscription_id, request_id)
    except RedisError:
        log.error("push subscription %s could not be destroyed nor recorded", subscription_id)


async def _release(lock: store.Lock) -> None:
    try:
        await lock.release()
    except RedisError:
        pass


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
            await client.get_session()
            sub = await client.push_subscription_create(
                _device_client_id(client), callback_url, PUSH_TYPES,
                expires=utc_date(now + keys.PUSH_SUBSCRIPTION_LIFETIME_S),
            )
        except JmapError as exc:
            log.warning("push subscription not created: %s", type(exc).__name__)
            raise _unavailable("service_unavailable") from exc
        try:
            await store.record_registration(redis, store.Registration(digest, sub.id),
                                            url=callback_url, expires=unix_of(sub.expires),
                                            now=now)
        except RedisError as exc:
            await _destroy_or_orphan_quietly(redis, client, sub.id, request_id)
            raise _unavailable("push_state_unavailable") from exc
        return {"push_subscription_id": sub.id}
    finally:
        await _release(lock)


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
            await _destroy_or_orphan(redis, client, previous.subscription_id, request_id)
            await store.forget_registration(redis, previous)
        finally:
            await _release(lock)
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
        if not await _destroy(await connect(), sub_id):
            raise _unavailable("push_destroy_failed")  # mapping kept: the disable can be retried
        await store.forget_registration(redis, store.Registration(digest, sub_id))
    except RedisError as exc:
        raise _unavailable("push_state_unavailable") from exc
    finally:
        await _release(lock)
    return {"disabled": True}


async def sweep_orphans(redis: Redis, client: JmapClient) -> int:
    """Destroy every subscription recorded under `push:orphan:*`; the number cleaned up."""
    cleaned = 0
    for sub_id in await store.orphans(redis):
        if await _destroy(client, sub_id):
            await store.drop_orphan(redis, sub_id)
            cleaned += 1
    return cleaned


# ---------------------------------------------------------------------------------- lifecycle

MaintenanceOutcome = Literal["off", "busy", "ok", "renewed", "recreated", "failed"]


def renewal_due(lc: store.Lifecycle, now: float) -> bool:
    """Less than a third of the granted lifetime (from `granted` to `expires`) remains. A
    subscription without an expiry never needs renewing."""
    if lc.expires is None:
        return False
    granted = lc.granted
    if granted is None:  # recorded before the lifecycle knew it: assume what we ask for
        granted = lc.expires - keys.PUSH_SUBSCRIPTION_LIFETIME_S
    lifetime = max(lc.expires - granted, 0)
    return lc.expires - now < lifetime / 3


async def maintain(
    redis: Redis, client: JmapClient | None, *, now: float
) -> MaintenanceOutcome:
    """One lifecycle pass over the current registration (the scheduler runs it once per
    `PUSH_MAINTENANCE_INTERVAL_S`, cluster-wide; `client` None = no live JMAP runtime):

    - PushSubscription/get of the subscription; a failure records `check_failed`;
    - gone from the server (restart, expiry, cleanup) → re-create it from the stored URL;
    - otherwise store the `expires` the server reports and, when `renewal_due`, extend it with
      PushSubscription/set update `{expires: now + 7 d}` (the server may grant less; what it
      returns is stored). Refused → re-create (the refused one is destroyed or orphaned);
      unreachable → `renewal_failed`, retried next pass;
    - a re-create needs a PushVerification again; it failing records `recreate_failed`.
    A pass that keeps the subscription alive clears the recorded failure. It holds the URL's
    register lock, so it never races a registration or a disable ("busy": skipped)."""
    lc = await store.read_lifecycle(redis)
    if lc is None:
        return "off"
    lock = store.push_register_lock(redis, lc.registration.url_digest)
    if not await lock.acquire():
        return "busy"
    try:
        return await _maintain(redis, client, lc, now)
    finally:
        await _release(lock)


async def _fail(redis: Redis, lc: store.Lifecycle, reason: str) -> MaintenanceOutcome:
    log.warning("push subscription %s: %s", lc.registration.subscription_id, REASONS[reason])
    await store.update_lifecycle(redis, lc.registration, {"failure": reason})
    return "failed"


def _expiry_field(expires: int | None) -> str:
    return "" if expires is None else str(expires)


async def _maintain(
    redis: Redis, client: JmapClient | None, lc: store.Lifecycle, now: float
) -> MaintenanceOutcome:
    sub_id = lc.registration.subscription_id
    if client is None:
        return await _fail(redis, lc, "check_failed")
    try:
        lookup = await client.push_subscription_get([sub_id])
    except JmapError as exc:
        log.warning("PushSubscription/get failed: %s", type(exc).__name__)
        return await _fail(redis, lc, "check_failed")
    sub = lookup.found.get(sub_id)
    if sub is None:
        log.warning("push subscription %s is gone from the server", sub_id)
        return await _recreate(redis, client, lc, now, destroy_old=False)
    if sub.expires_known and unix_of(sub.expires) != lc.expires:
        lc = replace(lc, expires=unix_of(sub.expires), granted=int(now))  # the server's word
    if not renewal_due(lc, now):
        await store.update_lifecycle(redis, lc.registration, {
            "expires": _expiry_field(lc.expires),
            "granted": None if lc.granted is None else str(lc.granted), "failure": None,
        })
        return "ok"
    wanted = utc_date(now + keys.PUSH_SUBSCRIPTION_LIFETIME_S)
    try:
        granted = await client.push_subscription_set_expires(sub_id, wanted)
    except JmapSetError as exc:
        log.warning("push subscription %s renewal refused (%s): re-creating", sub_id, exc.type)
        return await _recreate(redis, client, lc, now, destroy_old=exc.type != "notFound")
    except JmapError as exc:
        log.warning("push subscription %s renewal failed: %s", sub_id, type(exc).__name__)
        return await _fail(redis, lc, "renewal_failed")
    await store.update_lifecycle(redis, lc.registration, {
        "expires": _expiry_field(unix_of(granted) or unix_of(wanted)), "granted": str(int(now)),
        "failure": None,
    })
    log.info("push subscription %s extended to %s", sub_id, granted)
    return "renewed"


async def _recreate(
    redis: Redis, client: JmapClient, lc: store.Lifecycle, now: float, *, destroy_old: bool
) -> MaintenanceOutcome:
    old = lc.registration
    if lc.url is None:
        return await _fail(redis, lc, "url_unknown")
    if destroy_old:
        await _destroy_or_orphan_quietly(redis, client, old.subscription_id, "push-maintenance")
    try:
        await client.get_session()
        sub = await client.push_subscription_create(
            _device_client_id(client), lc.url, PUSH_TYPES,
            expires=utc_date(now + keys.PUSH_SUBSCRIPTION_LIFETIME_S),
        )
    except JmapError as exc:
        log.warning("push subscription not re-created: %s", type(exc).__name__)
        return await _fail(redis, lc, "recreate_failed")
    new = store.Registration(old.url_digest, sub.id)
    try:
        replaced = await store.replace_subscription(
            redis, old, new, url=lc.url, expires=unix_of(sub.expires), now=now)
    except RedisError:
        await _destroy_or_orphan_quietly(redis, client, sub.id, "push-maintenance")
        raise
    if not replaced:  # registered anew or disabled meanwhile: ours is not wanted
        await _destroy_or_orphan_quietly(redis, client, sub.id, "push-maintenance")
        return "busy"
    log.warning("push subscription %s re-created as %s (awaiting verification)",
                old.subscription_id, sub.id)
    return "recreated"
