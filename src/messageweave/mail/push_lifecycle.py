"""The push subscription's life on the JMAP server (docs/reference.md §7.2): creating and
destroying it, keeping it alive, and what its health is.

A subscription is created with an explicit `expires` (now + 7 days; the server may grant less)
and `maintain` (run by the scheduler once a minute, cluster-wide) checks it with
PushSubscription/get, extends it when less than a third of its granted lifetime remains, and
re-creates it from the stored callback URL when the server lost or refused it. `assess` turns
what is stored into `ok`, `degraded: <reason>` or `off`. Every function takes the time as a
parameter (`now`), so tests drive expiry without sleeping.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from redis.exceptions import RedisError

from messageweave.logs import RepeatLog
from messageweave.mail.jmap import JmapClient, JmapError, JmapSetError, PushSubscription
from messageweave.store import keys
from messageweave.store import push as store
from messageweave.store.config_store import sha256_hex
from messageweave.store.locks import Lock
from messageweave.store.redis import Redis

log = logging.getLogger(__name__)
# The JMAP failures of maintenance passes: class, reason and what to check, at most once a
# minute per step and class, and one line when the step works again.
_failures = RepeatLog(log)
CHECK = "push subscription check (PushSubscription/get)"
RENEWAL = "push subscription renewal"
RECREATION = "push subscription re-creation"

PUSH_TYPES = ("Email",)
# The query parameter of the callback URL that carries the subscription's token (issue #23).
TOKEN_PARAM = "t"
TOKEN_BYTES = 32  # `secrets.token_urlsafe(32)`: 43 characters, 256 random bits


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


# ---------------------------------------------------------------------------------- subscription


def _device_client_id(client: JmapClient) -> str:
    return f"message-weave-{client.account_id}"


def with_token(callback_url: str, token: str) -> str:
    """The operator's callback URL with `t=<token>` added to its query (any `t` it had is
    replaced)."""
    parts = urlsplit(callback_url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
             if k != TOKEN_PARAM]
    return urlunsplit(parts._replace(query=urlencode([*query, (TOKEN_PARAM, token)])))


@dataclass(frozen=True)
class Created:
    """A new subscription and the digest of the token its callback URL carries."""

    subscription: PushSubscription
    token_digest: str


async def create_subscription(client: JmapClient, callback_url: str, now: float) -> Created:
    """PushSubscription/set create for `callback_url` plus a fresh random token
    (`with_token`), asking for `expires` = now + `PUSH_SUBSCRIPTION_LIFETIME_S` (the server
    may grant less). Only the token's SHA-256 is kept. Raises `JmapError`."""
    await client.get_session()
    token = secrets.token_urlsafe(TOKEN_BYTES)
    sub = await client.push_subscription_create(
        _device_client_id(client), with_token(callback_url, token), PUSH_TYPES,
        expires=utc_date(now + keys.PUSH_SUBSCRIPTION_LIFETIME_S),
    )
    return Created(sub, sha256_hex(token))


async def destroy(client: JmapClient, subscription_id: str) -> bool:
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


async def destroy_or_orphan(
    redis: Redis, client: JmapClient, subscription_id: str, request_id: str
) -> None:
    if not await destroy(client, subscription_id):
        log.warning("push subscription %s left as an orphan", subscription_id)
        await store.record_orphan(redis, subscription_id, request_id)


async def destroy_or_orphan_quietly(
    redis: Redis, client: JmapClient, subscription_id: str, request_id: str
) -> None:
    try:
        await destroy_or_orphan(redis, client, subscription_id, request_id)
    except RedisError:
        log.error("push subscription %s could not be destroyed nor recorded", subscription_id)


async def release_lock(lock: Lock) -> None:
    try:
        await lock.release()
    except RedisError:
        pass


async def sweep_orphans(redis: Redis, client: JmapClient) -> int:
    """Destroy every subscription recorded under `push:orphan:*`; the number cleaned up."""
    cleaned = 0
    for sub_id in await store.orphans(redis):
        if await destroy(client, sub_id):
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
    - gone from the server (restart, expiry, cleanup) → re-create it from the stored URL; so
      is one whose callback URL carries no token (made before issue #23);
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
        await release_lock(lock)


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
        _failures.failed(CHECK, exc)
        return await _fail(redis, lc, "check_failed")
    _failures.recovered(CHECK)
    sub = lookup.found.get(sub_id)
    if sub is None:
        log.warning("push subscription %s is gone from the server", sub_id)
        return await _recreate(redis, client, lc, now, destroy_old=False)
    if lc.token is None:  # made before callback tokens (issue #23): every push is refused
        log.warning("push subscription %s has no callback token: re-creating it", sub_id)
        return await _recreate(redis, client, lc, now, destroy_old=True)
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
        _failures.failed(RENEWAL, exc)
        return await _fail(redis, lc, "renewal_failed")
    _failures.recovered(RENEWAL)
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
        await destroy_or_orphan_quietly(redis, client, old.subscription_id, "push-maintenance")
    try:
        created = await create_subscription(client, lc.url, now)
    except JmapError as exc:
        _failures.failed(RECREATION, exc)
        return await _fail(redis, lc, "recreate_failed")
    _failures.recovered(RECREATION)
    sub = created.subscription
    new = store.Registration(old.url_digest, sub.id)
    try:
        replaced = await store.replace_subscription(
            redis, old, new, url=lc.url, expires=unix_of(sub.expires), now=now,
            token_digest=created.token_digest)
    except RedisError:
        await destroy_or_orphan_quietly(redis, client, sub.id, "push-maintenance")
        raise
    if not replaced:  # registered anew or disabled meanwhile: ours is not wanted
        await destroy_or_orphan_quietly(redis, client, sub.id, "push-maintenance")
        return "busy"
    log.warning("push subscription %s re-created as %s (awaiting verification)",
                old.subscription_id, sub.id)
    return "recreated"
