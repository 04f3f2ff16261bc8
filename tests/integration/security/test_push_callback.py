"""Issue #23, finding 1: `/push/jmap` made the service work for anyone. Each test's docstring
names the part of the finding it catches.

The JMAP server is the RFC-shaped PushSubscription responder of `mailbox/push_server.py` over
real HTTPS, which counts the connections it accepts; Redis is real. The app's own background
jobs that would call the JMAP server (push maintenance, the degraded-push pass, the orphan
sweep, the gap audit, the periodic pass) are kept off, so every connection and every pass
counted here was caused by a request of the test.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.mail import push, scheduler
from messageweave.mail.context import MailContext
from messageweave.mail.jmap import JmapClient
from messageweave.mail.reconcile import Progress
from messageweave.store import keys
from messageweave.store.catchup import take_catchup
from messageweave.store.config_store import sha256_hex
from messageweave.store.push import Registration, record_registration
from tests.helpers import assert_envelope, closed_port, eventually, login, sample_wire
from tests.integration.mailbox.push_server import PushServer
from tests.peers.cyrus import CyrusServer

CALLBACK = "https://bot.example.org/push/jmap"
TOKEN = "callback-token-of-the-test-0123456789abcdef"  # what a registration would have minted
ACCOUNT = "u1"  # the responder's account
POSTS = 1000


def state_change(*accounts: str) -> dict[str, Any]:
    return {"@type": "StateChange", "changed": {a: {"Email": "s2"} for a in accounts}}


class Passes:
    """Counts the scheduler's reconcile passes (the real pass still runs)."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.count = 0
        self.pushed = 0  # those a push started (`source="jmap_push"`), not a schedule's

    async def __call__(self, svc: MailContext, **kw: Any) -> Progress:
        self.count += 1
        self.pushed += kw.get("source") == "jmap_push"
        result: Progress = await self._real(svc, **kw)
        return result

    def started(self, n: int) -> Callable[[], Awaitable[bool]]:
        """A check for `eventually`: `n` passes have started."""
        async def check() -> bool:
            return self.count >= n
        return check


@pytest.fixture
def passes(monkeypatch: pytest.MonkeyPatch) -> Passes:
    recorder = Passes(scheduler.run_pass)
    monkeypatch.setattr(scheduler, "run_pass", recorder)
    return recorder


@pytest.fixture
async def server(cyrus: CyrusServer, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[PushServer]:
    monkeypatch.setenv("SSL_CERT_FILE", str(cyrus.ca_file))
    async with PushServer(cyrus) as srv:
        yield srv


async def configure(client: httpx.AsyncClient, server: PushServer,
                    redis: aioredis.Redis) -> dict[str, str]:
    """The app configured for the responder's account and switched on, with the background
    jobs that would reach the JMAP server on their own held off; the admin headers."""
    for slot in (keys.PUSH_MAINTENANCE_SCHEDULE, keys.PUSH_DEGRADED_RECONCILE_SCHEDULE,
                 keys.ORPHAN_SWEEP_SCHEDULE):
        await redis.set(slot, "taken by the test", ex=3600)
    headers = await login(client)
    wire = sample_wire(jmap_session_url=server.url, reconcile_interval_s=0, audit_interval_s=0,
                       telegram_api_base_url=f"http://127.0.0.1:{closed_port()}")
    saved = await client.put("/api/business-config", headers=headers, json=wire)
    assert saved.status_code == 200, saved.text
    enabled = await client.put("/api/enabled", headers=headers, json={"enabled": True})
    assert enabled.status_code == 200, enabled.text
    return headers


@pytest.fixture
async def admin(
    client: httpx.AsyncClient, server: PushServer, redis_client: aioredis.Redis,
    passes: Passes,
) -> dict[str, str]:
    return await configure(client, server, redis_client)


async def registered(redis: aioredis.Redis, *, verified: bool = True) -> str:
    """A registration of CALLBACK whose subscription was made with TOKEN in its URL (the
    lifecycle keeps the token's digest, reference §1.6) and, with `verified`, has completed
    its PushVerification. The path and query the JMAP server posts to."""
    now = int(time.time())
    await record_registration(redis, Registration(sha256_hex(CALLBACK), "P1"), url=CALLBACK,
                              now=now)
    fields: dict[str, str | int] = {"token": sha256_hex(TOKEN)}
    if verified:
        fields["verified"] = now
    await redis.hset(keys.PUSH_LIFECYCLE, mapping=fields)
    return f"/push/jmap?t={TOKEN}"


async def connect(client: httpx.AsyncClient) -> None:
    """Make the app's JMAP client live, as its first pass would (the responder has no
    Email/changes, so the pass itself fails: 503)."""
    response = await client.post("/reconcile",
                                 headers={"Authorization": "Bearer reconcile-SECRET"})
    assert response.status_code == 503, response.text


async def acted_on(redis: aioredis.Redis) -> list[str]:
    """What a StateChange acted on leaves behind."""
    found = [k for k in (keys.PUSH_LAST_STATE_CHANGE, keys.PUSH_CATCHUP_DEFERRED)
             if await redis.exists(k)]
    return found + list(await redis.keys("a:{default}:reconcile:catchup:*"))


async def test_anonymous_state_changes_open_no_jmap_connection(
    client: httpx.AsyncClient, server: PushServer, redis_client: aioredis.Redis,
    passes: Passes,
) -> None:
    """Finding 1 (issue #23): while JMAP was not connected and a registration existed, every
    anonymous StateChange ran `connect()` and one Basic-auth session request; with a wrong
    stored password that is a stream of failed logins at the mail server. 1,000 anonymous
    posts must open no connection, log in nowhere and run no pass."""
    server.responder.refuse_auth = True  # a wrong stored password: the client never connects
    await configure(client, server, redis_client)
    await registered(redis_client)
    before = server.connections
    answers = set()
    for n in range(POSTS):
        path = "/push/jmap" if n % 2 else "/push/jmap?t=guess" + str(n)
        answers.add((await client.post(path, json=state_change(ACCOUNT))).status_code)
    assert server.connections - before == 0, "anonymous posts reached the mail server"
    assert passes.count == 0
    assert await acted_on(redis_client) == []
    assert answers == {401}


async def test_anonymous_state_changes_naming_our_account_run_no_pass(
    client: httpx.AsyncClient, admin: dict[str, str], server: PushServer,
    redis_client: aioredis.Redis, passes: Passes,
) -> None:
    """Finding 1 (issue #23): while JMAP was healthy, a trickle of anonymous posts naming our
    account kept reconcile passes running back to back, and anyone could set
    `push:state-change:last` (the metrics' and the trace's "via push"). Without the callback
    token a post changes nothing."""
    await registered(redis_client)
    await connect(client)
    requests = server.requests
    for _ in range(POSTS):
        response = await client.post("/push/jmap", json=state_change(ACCOUNT))
        assert_envelope(response, 401, "unauthorized")
    assert await acted_on(redis_client) == []
    assert passes.count == 0 and server.requests == requests


async def test_verified_pushes_start_at_most_one_pass_per_interval(
    client: httpx.AsyncClient, admin: dict[str, str], server: PushServer,
    redis_client: aioredis.Redis, passes: Passes,
) -> None:
    """Finding 1 (issue #23): a catch-up ran after every push that came after the previous
    pass took its flag, so pushes kept passes running back to back. With the subscription's
    own token, 1,000 posts start at most one pass per `PUSH_CATCHUP_INTERVAL_S`."""
    path = await registered(redis_client)
    await connect(client)
    started = time.monotonic()
    for _ in range(POSTS):
        assert (await client.post(path, json=state_change(ACCOUNT))).status_code == 204
    elapsed = time.monotonic() - started
    await eventually(passes.started(1), "the first push's pass, woken at once", 5)
    # the passes the posts started: a scheduled pass in the window is not one of them
    assert passes.pushed <= 1 + elapsed / keys.PUSH_CATCHUP_INTERVAL_S, (passes.pushed, elapsed)
    assert await redis_client.get(keys.PUSH_LAST_STATE_CHANGE) is not None


async def test_push_catch_ups_are_coalesced_by_the_injected_clock(
    redis_client: aioredis.Redis,
) -> None:
    """Finding 1 (issue #23), the coalescing itself, by an injected clock (nothing sleeps):
    a scheduler that takes every catch-up flag at once ran one pass per push. Pushes within
    the interval leave one deferred catch-up, released once the interval has passed."""
    sc = push.StateChange(state_change(ACCOUNT)["changed"])
    t0 = 1_700_000_000.0
    interval = keys.PUSH_CATCHUP_INTERVAL_S
    taken = 0
    step = interval / 2 / POSTS  # all within the first half of the interval
    for n in range(POSTS):  # each flag taken at once by the scheduler
        await push.state_changed(redis_client, ACCOUNT, sc, now=t0 + n * step)
        taken += await take_catchup(redis_client, ACCOUNT)
    assert taken == 1
    assert not await push.release_deferred(redis_client, ACCOUNT, now=t0 + interval - 0.01)
    assert not await take_catchup(redis_client, ACCOUNT)
    assert await push.release_deferred(redis_client, ACCOUNT, now=t0 + interval)
    assert await take_catchup(redis_client, ACCOUNT)  # the deferred pushes' one pass
    assert not await push.release_deferred(redis_client, ACCOUNT, now=t0 + 3 * interval)
    # the next interval starts at the release: a push right after it is deferred again
    assert not await push.state_changed(redis_client, ACCOUNT, sc, now=t0 + 1.5 * interval)
    assert not await take_catchup(redis_client, ACCOUNT)
    assert await push.release_deferred(redis_client, ACCOUNT, now=t0 + 2 * interval)
    assert await take_catchup(redis_client, ACCOUNT)
    # a clock that went back does not hold pushes off for longer than one interval
    assert await push.state_changed(redis_client, ACCOUNT, sc, now=t0 - 3600)


async def test_a_push_read_a_moment_before_the_release_is_deferred_not_run_again(
    redis_client: aioredis.Redis,
) -> None:
    """Catches: under load (the security suite on a busy machine: 3 passes in 1.04 s where at
    most 2 may run), a push whose `now` was read a moment before the scheduler released the
    deferred catch-up ran a second pass 10 ms after the release's. The release had moved `due`
    to its own now + interval, a hair more than one interval past the push's older `now`,
    which the guard against a clock that went back took for a jump: it flagged at once. Two
    clocks (two instances, or one request delayed between reading the time and the script) a
    few milliseconds apart must not double a pass."""
    sc = push.StateChange(state_change(ACCOUNT)["changed"])
    t0 = 1_700_000_000.0
    interval = keys.PUSH_CATCHUP_INTERVAL_S
    assert await push.state_changed(redis_client, ACCOUNT, sc, now=t0)
    assert await take_catchup(redis_client, ACCOUNT)
    assert not await push.state_changed(redis_client, ACCOUNT, sc, now=t0 + interval / 2)
    assert await push.release_deferred(redis_client, ACCOUNT, now=t0 + interval + 0.005)
    assert await take_catchup(redis_client, ACCOUNT)  # the release's pass
    # the push read its clock 4 ms before the release ran: deferred, not a pass of its own
    assert not await push.state_changed(redis_client, ACCOUNT, sc, now=t0 + interval + 0.001)
    assert not await take_catchup(redis_client, ACCOUNT)
    assert await redis_client.exists(keys.PUSH_CATCHUP_DEFERRED)


async def test_a_push_within_the_interval_is_not_lost(
    client: httpx.AsyncClient, admin: dict[str, str], redis_client: aioredis.Redis,
    passes: Passes,
) -> None:
    """Finding 1 (issue #23), what coalescing must not cost: a mail pushed right after a
    pass still gets its pass, one interval later, from the running scheduler."""
    path = await registered(redis_client)
    await connect(client)
    assert (await client.post(path, json=state_change(ACCOUNT))).status_code == 204
    await eventually(passes.started(1), "the first pass", 5)
    assert (await client.post(path, json=state_change(ACCOUNT))).status_code == 204
    await eventually(passes.started(2), "the deferred push's pass", 5)
    assert not await redis_client.exists(keys.PUSH_CATCHUP_DEFERRED)


@pytest.fixture
def poll_an_hour_away(monkeypatch: pytest.MonkeyPatch) -> float:
    """The scheduler's poll of the catch-up flags an hour away, and a 2 s interval: a second
    push right after a first one is deferred for sure. Requested before the app starts."""
    monkeypatch.setattr(scheduler, "POLL_S", 3600.0)
    monkeypatch.setattr(keys, "PUSH_CATCHUP_INTERVAL_S", 2)
    return 2.0


async def test_a_deferred_push_starts_its_pass_at_the_interval_s_end_not_at_the_next_poll(
    poll_an_hour_away: float, client: httpx.AsyncClient, admin: dict[str, str],
    redis_client: aioredis.Redis, passes: Passes,
) -> None:
    """Bug caught (issue #26): a push deferred to the end of its interval waited for the first
    poll of the scheduler after that end (up to `POLL_S`, 200 ms, on top of the interval). Here
    the poll is an hour away, so the deferred push's pass runs only if the instance that
    deferred it wakes its scheduler when the interval ends; no sooner than that end."""
    path = await registered(redis_client)
    await connect(client)
    pushed = time.monotonic()
    assert (await client.post(path, json=state_change(ACCOUNT))).status_code == 204
    assert (await client.post(path, json=state_change(ACCOUNT))).status_code == 204
    assert await redis_client.exists(keys.PUSH_CATCHUP_DEFERRED)  # the second one deferred
    await eventually(passes.started(1), "the first pass", 5)
    await eventually(passes.started(2), "the deferred push's pass", poll_an_hour_away + 10)
    assert time.monotonic() - pushed >= poll_an_hour_away - 0.1  # the interval still held
    assert not await redis_client.exists(keys.PUSH_CATCHUP_DEFERRED)


@pytest.mark.parametrize("content_type", [
    "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None,
])
async def test_a_push_that_is_not_application_json_is_refused(
    client: httpx.AsyncClient, admin: dict[str, str], redis_client: aioredis.Redis,
    content_type: str | None,
) -> None:
    """Finding 1 (issue #23): `Content-Type: text/plain` was accepted, so any web page could
    fire a push cross-site without a CORS preflight. Only `application/json` is read."""
    path = await registered(redis_client)
    await connect(client)
    headers = {} if content_type is None else {"Content-Type": content_type}
    body = json.dumps(state_change(ACCOUNT)).encode()
    response = await client.post(path, content=body, headers=headers)
    assert_envelope(response, 415, "unsupported_media_type")
    assert await acted_on(redis_client) == []
    fine = await client.post(path, content=body,
                             headers={"Content-Type": "application/json; charset=utf-8"})
    assert fine.status_code == 204
    assert await redis_client.get(keys.PUSH_LAST_STATE_CHANGE) is not None


async def test_thousands_of_accounts_are_neither_read_anonymously_nor_accepted(
    client: httpx.AsyncClient, admin: dict[str, str], redis_client: aioredis.Redis,
) -> None:
    """Finding 1 (issue #23): `changed` naming 2,600 guessed accounts in 56 KB was parsed and
    answered 204. Anonymously it is refused before it is read; from the subscription, a body
    naming more accounts than `MAX_PUSH_ACCOUNTS` is a 400, and one of our account among a
    few others is acted on for ours only."""
    path = await registered(redis_client)
    await connect(client)
    guesses = [f"{n:04d}" for n in range(2600)]
    body = json.dumps(state_change(*guesses, ACCOUNT), separators=(",", ":")).encode()
    assert len(body) < 60_000  # the finding's 56 KB, under MAX_PUSH_BODY_BYTES
    json_type = {"Content-Type": "application/json"}
    assert_envelope(await client.post("/push/jmap", content=body, headers=json_type), 401,
                    "unauthorized")
    assert_envelope(await client.post(path, content=body, headers=json_type), 400,
                    "invalid_request")
    assert await acted_on(redis_client) == []
    few = state_change(*guesses[:push.MAX_PUSH_ACCOUNTS - 1], ACCOUNT)
    assert (await client.post(path, json=few)).status_code == 204
    assert await redis_client.get(keys.PUSH_LAST_STATE_CHANGE) is not None


async def test_an_unverified_subscription_records_no_state_change(
    client: httpx.AsyncClient, admin: dict[str, str], redis_client: aioredis.Redis,
    passes: Passes,
) -> None:
    """Finding 1 (issue #23): `push:state-change:last` was set by any StateChange naming our
    account. It is set (and a catch-up asked for) only for a subscription whose
    PushVerification completed (a server sends no StateChange before it, RFC 8620 §7.2)."""
    path = await registered(redis_client, verified=False)
    await connect(client)
    assert (await client.post(path, json=state_change(ACCOUNT))).status_code == 204
    assert await acted_on(redis_client) == []


async def test_registration_puts_a_fresh_token_in_the_callback_and_verification_needs_it(
    client: httpx.AsyncClient, admin: dict[str, str], server: PushServer,
    redis_client: aioredis.Redis,
) -> None:
    """Finding 1 (issue #23): the callback URL carried nothing a sender had to know. A
    registration now gives the subscription the operator's URL plus a random token, keeps only
    the token's digest, and the PushVerification (which comes to that URL) still completes."""
    response = await client.post("/api/push/register", headers=admin,
                                 json={"callback_url": CALLBACK})
    assert response.json() == {"push_subscription_id": "P1"}, response.text
    url = server.responder.subscriptions["P1"]["url"]
    parts = urlsplit(url)
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == CALLBACK
    [token] = parse_qs(parts.query)[push.TOKEN_PARAM]
    assert len(token) >= 32
    lifecycle = await redis_client.hgetall(keys.PUSH_LIFECYCLE)
    assert lifecycle["url"] == CALLBACK and lifecycle["token"] == sha256_hex(token)
    assert token not in json.dumps(lifecycle)
    code = server.responder.codes["P1"]
    body = {"@type": "PushVerification", "pushSubscriptionId": "P1", "verificationCode": code}
    assert_envelope(await client.post("/push/jmap", json=body), 401, "unauthorized")
    assert await redis_client.get(keys.push_subscription_status("P1")) == "pending"
    verified = await client.post(f"{parts.path}?{parts.query}", json=body)
    assert verified.status_code == 204, verified.text
    assert await redis_client.get(keys.push_subscription_status("P1")) == "verified"


async def test_a_subscription_made_before_tokens_is_recreated_with_one(
    server: PushServer, redis_client: aioredis.Redis,
) -> None:
    """Finding 1 (issue #23), the upgrade: a subscription created before callback tokens
    would have every push refused. The next maintenance pass replaces it with one whose URL
    carries a token (it needs a PushVerification again)."""
    async with JmapClient(server.url, "alice", "pw", timeout=10) as jmap:
        await jmap.get_session()
        created = await jmap.push_subscription_create("message-weave-u1", CALLBACK, ["Email"])
    await record_registration(redis_client, Registration(sha256_hex(CALLBACK), created.id),
                              url=CALLBACK, now=time.time())
    async with JmapClient(server.url, "alice", "pw", timeout=10) as jmap:
        await jmap.get_session()
        assert await push.maintain(redis_client, jmap, now=time.time()) == "recreated"
    [(new_id, sub)] = server.responder.subscriptions.items()
    assert new_id != created.id
    token = parse_qs(urlsplit(sub["url"]).query)[push.TOKEN_PARAM][0]
    lifecycle = await redis_client.hgetall(keys.PUSH_LIFECYCLE)
    assert lifecycle["id"] == new_id and lifecycle["token"] == sha256_hex(token)
