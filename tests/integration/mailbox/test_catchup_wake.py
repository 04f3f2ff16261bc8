"""A StateChange push wakes the scheduler's catch-up pass at once (issue #14): in process on the
instance that took the push, through `reconcile:catchup-wake` on every other one; the flag stays
the truth and the poll its fallback. Real app, real Redis, real Cyrus.

The poll is set to an hour (`scheduler.POLL_S`) before any scheduler starts, so a pass that runs
within the tests' deadlines was woken, never polled. Passes are observed by wrapping the
scheduler's `run_pass` (the real pass still runs): each finished one is queued with the
instance that ran it, and a test may hold one at a gate after its work is done, i.e. while the
scheduler is still inside it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave import runtime
from messageweave.aio import GRACE_S, cancel
from messageweave.mail import scheduler
from messageweave.mail.context import MailContext
from messageweave.mail.reconcile import Progress
from messageweave.store import keys
from messageweave.store.catchup import (
    announce_catchup,
    catchup_wakes,
    request_catchup,
    watch_catchups,
)
from messageweave.store.redis import connect
from tests.helpers import (
    RECONCILE_AUTH,
    FreshUser,
    configure,
    enqueued,
    eventually,
    mailbox_wire,
    running_client,
    settings_for,
    state_change,
)
from tests.integration.mailbox.push_server import PUSH, register_for_test
from tests.peers.cyrus import CyrusServer

WITHIN_S = 10.0  # generous for a busy machine; the poll would take an hour


@dataclass
class Pass:
    instance: MailContext
    progress: Progress
    started: float  # time.monotonic()


class Passes:
    """The scheduler's passes, in the order they finished."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self._finished: asyncio.Queue[Pass] = asyncio.Queue()
        self.count = 0
        self.gate: asyncio.Event | None = None  # the next pass waits for it once its work is done
        self.holding = asyncio.Event()

    async def __call__(self, svc: MailContext, **kw: Any) -> Progress:
        started = time.monotonic()
        progress: Progress = await self._real(svc, **kw)
        if self.gate is not None:
            gate, self.gate = self.gate, None
            self.holding.set()
            await gate.wait()
        self.count += 1
        self._finished.put_nowait(Pass(svc, progress, started))
        return progress

    async def next(self) -> Pass:
        try:
            return await asyncio.wait_for(self._finished.get(), WITHIN_S)
        except TimeoutError:
            raise AssertionError(f"no catch-up pass within {WITHIN_S} s") from None


@pytest.fixture
def passes(monkeypatch: pytest.MonkeyPatch) -> Passes:
    monkeypatch.setattr(scheduler, "POLL_S", 3600.0)
    # The wake is under test, not the minimum interval between push passes (issue #23,
    # tests/integration/security/test_push_callback.py): every push may start one.
    monkeypatch.setattr(keys, "PUSH_CATCHUP_INTERVAL_S", 0)
    recorder = Passes(scheduler.run_pass)
    monkeypatch.setattr(scheduler, "run_pass", recorder)
    return recorder


@asynccontextmanager
async def configured_app(
    url: str, cyrus: CyrusServer, mailbox: FreshUser, redis: aioredis.Redis
) -> AsyncIterator[httpx.AsyncClient]:
    """The app configured for `mailbox`, its baseline taken, push registered. The other jobs
    of the schedule have their slots taken, so every pass is a catch-up (the maintenance one
    would fail on Cyrus, mark push degraded and run a pass of its own)."""
    for slot in (keys.PUSH_MAINTENANCE_SCHEDULE, keys.PUSH_DEGRADED_RECONCILE_SCHEDULE,
                 keys.ORPHAN_SWEEP_SCHEDULE):
        await redis.set(slot, "taken by the test", ex=3600)
    async with running_client(settings_for(url)) as client:
        await configure(client, mailbox_wire(cyrus, mailbox))
        assert (await client.post("/reconcile", headers=RECONCILE_AUTH)).status_code == 204
        await register_for_test(redis)
        yield client


@pytest.fixture
async def app(
    passes: Passes, embedded_redis_url: str, cyrus: CyrusServer, mailbox: FreshUser,
    redis_client: aioredis.Redis, trust_cyrus: None,
) -> AsyncIterator[httpx.AsyncClient]:
    async with configured_app(embedded_redis_url, cyrus, mailbox, redis_client) as client:
        yield client


async def push(app: httpx.AsyncClient, mailbox: FreshUser) -> None:
    response = await app.post(PUSH, json=state_change(mailbox.client.account_id))
    assert response.status_code == 204, response.text


async def subscribers(redis: aioredis.Redis) -> int:
    [(_channel, count)] = await redis.pubsub_numsub(keys.CATCHUP_WAKE_CHANNEL)
    return int(count)


async def test_a_state_change_runs_the_catch_up_pass_without_waiting_for_the_poll(
    app: httpx.AsyncClient, passes: Passes, cyrus: CyrusServer, mailbox: FreshUser,
    redis_client: aioredis.Redis,
) -> None:
    """Bug caught: the pass waited for the scheduler's next poll of the flag (0–200 ms of every
    push → sendMessage); here the poll is an hour away and the pass still runs."""
    new = cyrus.append(user=mailbox.user, subject="woken")
    await push(app, mailbox)
    done = await passes.next()
    assert done.progress.enqueued == 1
    assert await enqueued(redis_client) == [new.email_id]


async def test_another_instance_is_woken_through_redis(
    passes: Passes, embedded_redis_url: str, cyrus: CyrusServer, mailbox: FreshUser,
    redis_client: aioredis.Redis, trust_cyrus: None, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Bug caught: only the instance that took the push was woken (in process). The one taking
    it here runs no scheduler; the only scheduler is a second instance with its own Redis
    connection, which only the `reconcile:catchup-wake` signal can reach before the poll."""

    async def no_scheduler(svc: MailContext) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(runtime, "run_scheduler", no_scheduler)
    async with configured_app(embedded_redis_url, cyrus, mailbox, redis_client) as client, \
            runtime.running(settings_for(embedded_redis_url)) as other:
        await other.jmap()  # its client connected, as after any pass it ran
        task = asyncio.create_task(scheduler.run_scheduler(other))
        try:
            await eventually(lambda: _subscribed(redis_client), "the EventSource subscribed",
                             WITHIN_S)
            new = cyrus.append(user=mailbox.user, subject="woken elsewhere")
            await push(client, mailbox)
            done = await passes.next()
        finally:
            await cancel(task)
    assert done.instance is other
    assert await enqueued(redis_client) == [new.email_id]


async def _subscribed(redis: aioredis.Redis) -> bool:
    return await subscribers(redis) >= 1


async def test_pushes_during_a_pass_coalesce_into_exactly_one_more_pass(
    app: httpx.AsyncClient, passes: Passes, cyrus: CyrusServer, mailbox: FreshUser,
    redis_client: aioredis.Redis,
) -> None:
    """Bugs caught: a push that lands while a pass runs is lost until the poll (the wake cleared
    after the flag was taken), or every push runs a pass of its own."""
    first = cyrus.append(user=mailbox.user, subject="first")
    passes.gate = gate = asyncio.Event()
    await push(app, mailbox)
    await asyncio.wait_for(passes.holding.wait(), WITHIN_S)  # pass 1 done, not yet returned
    during = cyrus.append(user=mailbox.user, subject="during")
    await asyncio.gather(*(push(app, mailbox) for _ in range(10)))
    flag = keys.reconcile_catchup(mailbox.client.account_id)
    assert await redis_client.exists(flag)  # one flag for ten
    gate.set()
    assert (await passes.next()).progress.enqueued == 1
    assert (await passes.next()).progress.enqueued == 1
    assert await enqueued(redis_client) == [first.email_id, during.email_id]
    assert not await redis_client.exists(flag)
    # the next pass is the one this push causes: none was left over from the ten
    last = cyrus.append(user=mailbox.user, subject="last")
    pushed_at = time.monotonic()
    await push(app, mailbox)
    third = await passes.next()
    assert third.started >= pushed_at and third.progress.enqueued == 1
    assert passes.count == 3
    assert await enqueued(redis_client) == [first.email_id, during.email_id, last.email_id]


async def test_a_flag_set_without_a_signal_is_still_taken_by_the_poll(
    passes: Passes, embedded_redis_url: str, cyrus: CyrusServer, mailbox: FreshUser,
    redis_client: aioredis.Redis, trust_cyrus: None, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Bug caught: a scheduler that only waits for the signal; a lost one (or the flag set again
    after a busy pass, which sends none) must still be taken by the poll."""
    monkeypatch.setattr(scheduler, "POLL_S", 0.05)
    async with configured_app(embedded_redis_url, cyrus, mailbox, redis_client):
        new = cyrus.append(user=mailbox.user, subject="polled")
        assert await request_catchup(redis_client, mailbox.client.account_id)  # no signal
        await passes.next()
    assert await enqueued(redis_client) == [new.email_id]


async def test_a_stopped_scheduler_closes_its_wake_subscription(
    embedded_redis_url: str, redis_client: aioredis.Redis,
) -> None:
    """Bug caught: the pub/sub connection outlived the scheduler (a leaked subscriber per
    restart of the loops)."""
    async with runtime.running(settings_for(embedded_redis_url)) as svc:
        task = asyncio.create_task(scheduler.run_scheduler(svc))
        await eventually(lambda: _subscribed(redis_client), "the EventSource subscribed",
                             WITHIN_S)
        await cancel(task)
        assert task.cancelled()
        await eventually(lambda: _unsubscribed(redis_client), "the EventSource unsubscribed",
                         WITHIN_S)


async def _unsubscribed(redis: aioredis.Redis) -> bool:
    return await subscribers(redis) == 0


async def test_the_app_stops_without_waiting_out_the_grace(
    embedded_redis_url: str, redis_client: aioredis.Redis,
) -> None:
    """Bug caught: redis-py swallowed the stop that landed inside the wake subscription's
    `get_message(timeout=…)`; the relay went on listening, and most stops of the app (SIGTERM,
    every test's teardown) waited out `aio.cancel`'s 5 s grace before the repeat took (the
    suite took twice as long). Several stops, since where the cancellation lands varies; each
    must end well inside the grace (the worker's own blocking read takes up to 1 s)."""
    for _ in range(6):
        async with running_client(settings_for(embedded_redis_url)) as client:
            assert (await client.get("/healthz")).status_code == 200
            stopping = time.monotonic()
        assert time.monotonic() - stopping < GRACE_S / 2, "the stop waited out the grace"


async def test_an_announcement_wakes_the_announced_accounts_schedulers_alone(
    redis_client: aioredis.Redis, embedded_redis_url: str,
) -> None:
    """Catches every scheduler of an instance woken by any account's push: at 200 accounts one
    mail's push made 200 schedulers tick, 200 `GETDEL`s through the Redis pool before or
    beside the pushed account's own (issue #37). A scheduler whose mail account is not known
    yet ("") still wakes on every announcement, this instance's and another's."""
    alice, bob, unknown = asyncio.Event(), asyncio.Event(), asyncio.Event()
    async with (catchup_wakes(redis_client, alice), catchup_wakes(redis_client, bob),
                catchup_wakes(redis_client, unknown)):
        watch_catchups(redis_client, alice, "alice")
        watch_catchups(redis_client, bob, "bob")
        await eventually(lambda: _subscribed(redis_client), "the wake subscription", WITHIN_S)
        await eventually(_is_set(unknown), "the wake of every scheduler once subscribed", WITHIN_S)
        for event in (alice, bob, unknown):
            event.clear()
        await announce_catchup(redis_client, "alice")  # on this instance: at once
        assert alice.is_set() and unknown.is_set() and not bob.is_set()
        alice.clear()
        unknown.clear()
        await eventually(_is_set(unknown), "the channel's echo of it", WITHIN_S)
        assert alice.is_set() and not bob.is_set()
        alice.clear()
        unknown.clear()
        other = connect(embedded_redis_url)
        try:
            await announce_catchup(other, "bob")  # another instance's: through the channel
            await eventually(_is_set(bob), "bob's scheduler woken by the channel", WITHIN_S)
        finally:
            await other.aclose()
        assert unknown.is_set() and not alice.is_set()


def _is_set(event: asyncio.Event) -> Callable[[], Awaitable[bool]]:
    async def is_set() -> bool:
        return event.is_set()

    return is_set
