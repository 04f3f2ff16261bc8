"""The push lifecycle (issue #11: push died silently after a week): the subscription is kept
alive, re-created when the server loses it, and reported as `degraded` when it cannot be; while
degraded the scheduler reconciles on its own.

The JMAP server for push is the RFC-shaped responder of push_server.py over real HTTPS (Cyrus
3.6 has no PushSubscription); its clock is injected, so expiry is driven without sleeping.
Maintenance passes that depend on that clock are run directly (`push.maintain(now=...)`) while
the app's own maintenance slot is held, so the app's real-time pass cannot interleave; the
scheduler tests use the app's own loop. Redis is real; the degraded-reconcile test reads real
mail from Cyrus.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.mail import push
from messageweave.mail.jmap import JmapClient
from messageweave.store import keys
from messageweave.store.config_store import sha256_hex
from messageweave.store.push import Registration, record_registration
from tests.helpers import (
    DAY,
    RECONCILE_AUTH,
    FakeClock,
    FreshUser,
    configure,
    enqueued,
    eventually,
    mailbox_wire,
    unix_of,
)
from tests.integration.mailbox.push_server import PushServer, callback_path
from tests.peers.cyrus import CyrusServer

CALLBACK = "https://bot.example.org/push/jmap"
# What `/api/push/status` says beside the subscription since issue #22 (the push in force, and
# the way Telegram's updates arrive): checked by tests/integration/receivers.
IN_FORCE_FIELDS = ("way", "push_mode", "last_event_at", "last_event_age_s", "updates",
                   "telegram_updates")
DIGEST = sha256_hex(CALLBACK)
REGISTRATION_KEYS = (keys.PUSH_REGISTRATION_CURRENT, keys.push_registration(DIGEST),
                     keys.PUSH_LIFECYCLE)


@pytest.fixture
async def jmap(server: PushServer, cyrus: CyrusServer) -> AsyncIterator[JmapClient]:
    """Our JMAP client for the responder, for maintenance passes run by the test itself."""
    async with JmapClient(server.url, "alice", "pw", ca_file=cyrus.ca_file, timeout=10) as c:
        yield c


async def hold_maintenance_slot(redis: aioredis.Redis) -> None:
    """The app's scheduler skips maintenance while this slot is taken: the test runs it."""
    await redis.set(keys.PUSH_MAINTENANCE_SCHEDULE, "test", ex=3600)


async def register_and_verify(
    client: httpx.AsyncClient, admin: dict[str, str], server: PushServer
) -> str:
    answer = await client.post("/api/push/register", headers=admin,
                               json={"callback_url": CALLBACK})
    sub_id: str = answer.json()["push_subscription_id"]
    await verify(client, server, sub_id)
    return sub_id


async def verify(client: httpx.AsyncClient, server: PushServer, sub_id: str) -> None:
    """What the callback URL would receive from the server right after the create."""
    body = {"@type": "PushVerification", "pushSubscriptionId": sub_id,
            "verificationCode": server.responder.codes[sub_id]}
    response = await client.post(pushed_to(server, sub_id), json=body)
    assert response.status_code == 204, response.text


def pushed_to(server: PushServer, sub_id: str) -> str:
    """Where the server posts for subscription `sub_id`: its URL with the token (issue #23)."""
    return callback_path(server.responder.subscriptions[sub_id]["url"])


async def current_callback(redis: aioredis.Redis, server: PushServer) -> str:
    """`pushed_to` of the current subscription."""
    return pushed_to(server, await redis.hget(keys.PUSH_LIFECYCLE, "id"))


def state_change() -> dict[str, object]:
    return {"@type": "StateChange", "changed": {"u1": {"Email": "s9"}}}


async def status(client: httpx.AsyncClient, admin: dict[str, str]) -> dict[str, object]:
    response = await client.get("/api/push/status", headers=admin)
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


# ------------------------------------------------------------------------------ renewal


@pytest.mark.usefixtures("switched_on")
async def test_an_approaching_expiry_is_extended_and_push_outlives_the_old_seven_days(
    client: httpx.AsyncClient, admin: dict[str, str], server: PushServer, jmap: JmapClient,
    clock: FakeClock, redis_client: aioredis.Redis,
) -> None:
    """Bug caught (issue #11): nothing renewed the subscription nor the registration keys, so
    after 7 days every StateChange was answered 401 and mail waited for reconcile."""
    await hold_maintenance_slot(redis_client)
    sub_id = await register_and_verify(client, admin, server)
    first_expiry = unix_of(server.responder.subscriptions[sub_id]["expires"])
    start = clock.now

    clock.now = start + 4 * DAY  # 3 days left of 7: more than a third, nothing to do yet
    assert await push.maintain(redis_client, jmap, now=clock.now) == "ok"
    assert unix_of(server.responder.subscriptions[sub_id]["expires"]) == first_expiry

    clock.now = start + 5.5 * DAY  # 1.5 days left: renewed well before the end
    assert await push.maintain(redis_client, jmap, now=clock.now) == "renewed"
    [(name, args, _)] = server.responder.bodies[-1]["methodCalls"]
    assert name == "PushSubscription/set" and list(args["update"][sub_id]) == ["expires"]
    renewed = unix_of(server.responder.subscriptions[sub_id]["expires"])
    assert renewed == int(clock.now) + keys.PUSH_SUBSCRIPTION_LIFETIME_S
    assert int(await redis_client.hget(keys.PUSH_LIFECYCLE, "expires")) == renewed

    clock.now = start + 8 * DAY  # past the old expiry and the old 7-day key TTL
    assert await push.maintain(redis_client, jmap, now=clock.now) == "ok"
    assert sub_id in server.responder.subscriptions
    for key in REGISTRATION_KEYS:
        assert await redis_client.ttl(key) == -1, key  # no EX: nothing lapses after a week
    assert (await push.health(redis_client, clock.now)).label == "ok"
    await redis_client.delete(keys.PUSH_LAST_STATE_CHANGE)
    response = await client.post(await current_callback(redis_client, server),
                                 json=state_change())
    assert response.status_code == 204, response.text
    # every StateChange is answered 204 (no oracle): acting on it is what shows it was accepted
    assert await redis_client.get(keys.PUSH_LAST_STATE_CHANGE) is not None


async def test_a_server_that_grants_less_is_renewed_on_its_own_terms(
    cyrus: CyrusServer, monkeypatch: pytest.MonkeyPatch, client: httpx.AsyncClient,
    redis_client: aioredis.Redis,
) -> None:
    """Bug caught: storing the expiry we asked for (7 d) when the server granted 2 d (RFC 8620
    §7.2 lets it), which would schedule the renewal days after the subscription is gone."""
    monkeypatch.setenv("SSL_CERT_FILE", str(cyrus.ca_file))
    clock = FakeClock()
    async with PushServer(cyrus, clock=clock, max_lifetime_s=2 * DAY) as server, \
            JmapClient(server.url, "alice", "pw", ca_file=cyrus.ca_file, timeout=10) as jmap:
        async def connect() -> JmapClient:
            return jmap

        await push.register(redis_client, connect, CALLBACK, "req", now=clock.now)
        granted = int(clock.now) + 2 * DAY
        assert int(await redis_client.hget(keys.PUSH_LIFECYCLE, "expires")) == granted
        clock.now += 1.2 * DAY  # 0.8 d left of 2: more than a third
        assert await push.maintain(redis_client, jmap, now=clock.now) == "ok"
        clock.now += 0.3 * DAY  # 0.5 d left: less than a third
        assert await push.maintain(redis_client, jmap, now=clock.now) == "renewed"
        assert int(await redis_client.hget(keys.PUSH_LIFECYCLE, "expires")) == (
            int(clock.now) + 2 * DAY)


# ------------------------------------------------------------------------------ loss


@pytest.mark.usefixtures("switched_on")
async def test_a_lost_subscription_is_recreated_by_the_scheduler_in_one_pass(
    client: httpx.AsyncClient, admin: dict[str, str], server: PushServer,
    redis_client: aioredis.Redis,
) -> None:
    """Bug caught: a JMAP server restart dropped the subscription and nothing noticed; the
    registration kept pointing at an id the server no longer knew."""
    old = await register_and_verify(client, admin, server)
    await eventually(lambda: redis_client.exists(keys.PUSH_MAINTENANCE_SCHEDULE),
                     "a maintenance pass", 3)
    server.responder.restart()
    calls = len(server.responder.bodies)
    await redis_client.delete(keys.PUSH_MAINTENANCE_SCHEDULE)  # the next pass, now not in 60 s

    async def recreated() -> bool:
        return await redis_client.hget(keys.PUSH_LIFECYCLE, "id") not in (None, old)

    await eventually(recreated, "the lost subscription re-created", 3)
    new = await redis_client.hget(keys.PUSH_LIFECYCLE, "id")
    assert server.responder.methods()[calls:] == ["PushSubscription/get", "PushSubscription/set"]
    sub = server.responder.subscriptions[new]
    assert sub["url"].startswith(CALLBACK + "?t=") and sub["types"] == ["Email"]
    assert await redis_client.get(keys.PUSH_REGISTRATION_CURRENT) == f"{DIGEST}:{new}"
    assert await redis_client.get(keys.push_registration(DIGEST)) == new
    assert await redis_client.get(keys.push_subscription_status(old)) == "disabled"
    assert (await status(client, admin))["verified"] is False  # a new one: verify again
    await verify(client, server, new)
    body = await status(client, admin)
    expires_in = body.pop("expires_in_s")
    assert isinstance(expires_in, int) and expires_in > keys.PUSH_SUBSCRIPTION_LIFETIME_S - 60
    assert body.pop("in_force") == "ok (subscription)"  # the push in force (issue #22)
    body = {k: v for k, v in body.items() if k not in IN_FORCE_FIELDS}
    assert body == {
        "state": "ok", "label": "ok", "reason": None, "subscription_id": new, "verified": True,
        "expires_at": unix_of(sub["expires"]), "last_state_change_at": None,
        "last_state_change_age_s": None}


@pytest.mark.usefixtures("switched_on")
async def test_a_lost_subscription_that_cannot_be_recreated_is_degraded_until_it_can(
    client: httpx.AsyncClient, admin: dict[str, str], server: PushServer, jmap: JmapClient,
    clock: FakeClock, redis_client: aioredis.Redis,
) -> None:
    """Bug caught: `/ready` said `"push": true` whatever happened; a lost subscription the
    server refuses to re-create must show as degraded, and recover by itself."""
    await hold_maintenance_slot(redis_client)
    await register_and_verify(client, admin, server)
    server.responder.restart()
    server.responder.refuse_creates = True
    assert await push.maintain(redis_client, jmap, now=clock.now) == "failed"
    body = await status(client, admin)
    assert (body["state"], body["reason"]) == ("degraded", "recreate_failed")
    assert body["label"] == "degraded: subscription lost, re-create failed"

    server.responder.refuse_creates = False
    assert await push.maintain(redis_client, jmap, now=clock.now) == "recreated"
    body = await status(client, admin)
    assert (body["state"], body["reason"]) == ("ok", None)


@pytest.mark.usefixtures("switched_on")
async def test_an_unreachable_server_is_degraded_and_clears_on_the_next_good_pass(
    client: httpx.AsyncClient, admin: dict[str, str], server: PushServer, jmap: JmapClient,
    clock: FakeClock, redis_client: aioredis.Redis,
) -> None:
    """Bug caught: a subscription nobody can check being reported as working."""
    await hold_maintenance_slot(redis_client)
    sub_id = await register_and_verify(client, admin, server)
    server.responder.down = True
    assert await push.maintain(redis_client, jmap, now=clock.now) == "failed"
    assert (await push.health(redis_client, clock.now)).label == "degraded: server check failed"
    server.responder.down = False
    assert await push.maintain(redis_client, jmap, now=clock.now) == "ok"
    health = await push.health(redis_client, clock.now)
    assert (health.label, health.subscription_id) == ("ok", sub_id)


@pytest.mark.usefixtures("switched_on")
async def test_an_expired_or_unverified_subscription_is_degraded(
    client: httpx.AsyncClient, admin: dict[str, str], server: PushServer, clock: FakeClock,
    redis_client: aioredis.Redis,
) -> None:
    """Bug caught: a subscription that can no longer push (past `expires`) or never could
    (no PushVerification arrived) reported as working."""
    await hold_maintenance_slot(redis_client)
    answer = await client.post("/api/push/register", headers=admin,
                               json={"callback_url": CALLBACK})
    sub_id = answer.json()["push_subscription_id"]
    within = await push.health(redis_client, clock.now + keys.PUSH_VERIFY_DEADLINE_S - 5)
    assert within.label == "ok" and within.verified is False  # verification is on its way
    late = await push.health(redis_client, clock.now + keys.PUSH_VERIFY_DEADLINE_S + 5)
    assert late.label == "degraded: subscription not verified in time"
    await verify(client, server, sub_id)
    expires = unix_of(server.responder.subscriptions[sub_id]["expires"])
    assert (await push.health(redis_client, expires - 1)).label == "ok"
    assert (await push.health(redis_client, expires)).label == "degraded: subscription expired"


@pytest.mark.usefixtures("switched_on")
async def test_a_registration_without_a_callback_url_is_degraded_until_registered_again(
    client: httpx.AsyncClient, admin: dict[str, str], server: PushServer, jmap: JmapClient,
    clock: FakeClock, redis_client: aioredis.Redis,
) -> None:
    """Bug caught: a registration made before the lifecycle existed (no stored URL) cannot be
    re-created; it must say so, and registering the same URL again must repair it."""
    await hold_maintenance_slot(redis_client)
    await record_registration(redis_client, Registration(DIGEST, "P-old"))  # the old layout
    assert await push.maintain(redis_client, jmap, now=clock.now) == "failed"
    health = await push.health(redis_client, clock.now)
    assert health.label == "degraded: subscription lost, callback URL unknown"
    again = await client.post("/api/push/register", headers=admin,
                              json={"callback_url": CALLBACK})
    assert again.json() == {"push_subscription_id": "P-old", "idempotent": True}
    assert await push.maintain(redis_client, jmap, now=clock.now) == "recreated"
    assert list(server.responder.subscriptions) == [
        await redis_client.hget(keys.PUSH_LIFECYCLE, "id")]


@pytest.mark.usefixtures("switched_on")
async def test_a_state_change_is_timed_for_the_last_state_change_age(
    client: httpx.AsyncClient, admin: dict[str, str], server: PushServer,
    redis_client: aioredis.Redis,
) -> None:
    """Bug caught: nothing recorded when pushes last arrived, so silence looked like health."""
    await hold_maintenance_slot(redis_client)
    await register_and_verify(client, admin, server)
    assert (await status(client, admin))["last_state_change_at"] is None
    before = int(time.time())
    path = await current_callback(redis_client, server)
    assert (await client.post(path, json=state_change())).status_code == 204
    body = await status(client, admin)
    assert isinstance(body["last_state_change_at"], int)
    assert before <= body["last_state_change_at"] <= time.time()
    assert body["last_state_change_age_s"] in (0, 1)
    # a StateChange for another account is answered alike (no oracle) and not recorded
    await redis_client.delete(keys.PUSH_LAST_STATE_CHANGE)
    other = {"@type": "StateChange", "changed": {"someone-else": {"Email": "x"}}}
    assert (await client.post(path, json=other)).status_code == 204
    assert await redis_client.get(keys.PUSH_LAST_STATE_CHANGE) is None


# ------------------------------------------------------------------------------ degraded


async def test_while_degraded_the_scheduler_reconciles_every_degraded_interval_on_its_own(
    client: httpx.AsyncClient, cyrus: CyrusServer, mailbox: FreshUser,
    redis_client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Bug caught (issue #11): with `reconcile_interval_s = 0` and push dead, mail waited
    forever. Here Cyrus cannot keep a subscription at all (no PushSubscription/get), so a
    registration is degraded, and the scheduler reconciles every
    `degraded_reconcile_interval_s` = 10 s with no cron and no push."""
    monkeypatch.setenv("SSL_CERT_FILE", str(cyrus.ca_file))
    interval = 10
    await configure(client, mailbox_wire(cyrus, mailbox, reconcile_interval_s=0,
                                         degraded_reconcile_interval_s=interval))
    baseline = await client.post("/reconcile", headers=RECONCILE_AUTH)
    assert baseline.status_code == 204
    first = cyrus.append(user=mailbox.user, subject="while push is degraded 1")
    await record_registration(redis_client, Registration(DIGEST, "P-cyrus"), url=CALLBACK,
                              expires=int(time.time()) + DAY, now=time.time())

    async def seen(email_id: str) -> bool:
        return email_id in await enqueued(redis_client)

    await eventually(lambda: seen(first.email_id), "a reconcile pass while degraded", 5)
    health = await push.health(redis_client, time.time())
    assert health.label == "degraded: server check failed"
    slot = keys.PUSH_DEGRADED_RECONCILE_SCHEDULE
    first_left = await redis_client.pttl(slot) / 1000
    assert interval / 2 - 1 < first_left <= interval * 1.5  # to the slot key's own phase
    first_ends = time.monotonic() + first_left
    second = cyrus.append(user=mailbox.user, subject="while push is degraded 2")
    await eventually(lambda: seen(second.email_id), "a second pass when the slot ends",
                     first_left + 4)
    # the next pass waited for the slot's end (a slot, not a hot loop), and the slot it took
    # lasts a whole interval, to the same phase
    assert time.monotonic() > first_ends - 0.5
    assert await redis_client.pttl(slot) > (interval - 3) * 1000
    assert await redis_client.get(keys.RECONCILE_SCHEDULE) is None  # not the periodic schedule
    assert await enqueued(redis_client) == [first.email_id, second.email_id]


@pytest.mark.usefixtures("switched_on")
async def test_push_that_works_adds_no_reconcile_passes(
    client: httpx.AsyncClient, admin: dict[str, str], server: PushServer,
    redis_client: aioredis.Redis,
) -> None:
    """Bug caught: reconciling on the degraded schedule while push is fine (wasted passes)."""
    await register_and_verify(client, admin, server)
    await eventually(lambda: redis_client.exists(keys.PUSH_MAINTENANCE_SCHEDULE),
                     "a maintenance pass", 3)
    # The orphan sweep's slot is claimed at the end of a tick's slot checks, after the degraded
    # one: freed now, it is claimed again once a whole round of checks has run since.
    await redis_client.delete(keys.ORPHAN_SWEEP_SCHEDULE)
    await eventually(lambda: redis_client.exists(keys.ORPHAN_SWEEP_SCHEDULE),
                     "a round of the scheduler's slot checks after the maintenance pass")
    assert (await push.health(redis_client, time.time())).label == "ok"
    assert await redis_client.exists(keys.PUSH_DEGRADED_RECONCILE_SCHEDULE) == 0
