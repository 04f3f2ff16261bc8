"""The catch-up flag of an account's mailbox (a push asks for a pass: `request_catchup`, the
scheduler that takes it runs one: `take_catchup`) and the signal that wakes this instance's
schedulers for it (`announce_catchup`, `relay_catchup_announcements`, `catchup_wakes`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass

from messageweave.aio import cancel, every, raise_if_cancelling
from messageweave.store import keys
from messageweave.store.keys import AccountKeys
from messageweave.store.redis import Redis, text_of
from messageweave.store.redis_url import initialized
from messageweave.store.together import together

log = logging.getLogger(__name__)


async def request_catchup(redis: Redis, account_id: str, *,
                          names: AccountKeys = keys.DEFAULT) -> bool:
    """Flag one pending catch-up for `account_id`; False when one was already pending."""
    return bool(await redis.set(names.reconcile_catchup(account_id), "1", nx=True,
                                ex=keys.CATCHUP_TTL_S))


async def take_catchup(redis: Redis, account_id: str, *,
                       names: AccountKeys = keys.DEFAULT) -> bool:
    """Consume the pending catch-up (GETDEL): exactly one instance gets True. Sent
    `together` with the polls of the other accounts' schedulers (their grid)."""
    key = names.reconcile_catchup(account_id)
    return await together(redis, lambda pipe: pipe.getdel(key)) is not None


class _CatchupWakes:
    """This instance's schedulers, found through its Redis client (the only thing the push
    handler and they share), each under the mail account whose flags it takes: an
    announcement wakes that account's alone, and those whose account is not known yet ("").
    Waking every scheduler for any account's push put the pushed one's tick behind one per
    account (200 `GETDEL`s through the pool for one mail, issue #37). Weak on both sides."""

    def __init__(self) -> None:
        self._by_client: weakref.WeakKeyDictionary[
            object, dict[str, weakref.WeakSet[asyncio.Event]]] = weakref.WeakKeyDictionary()

    def watch(self, client: object, event: asyncio.Event, account: str = "") -> None:
        accounts = self._by_client.setdefault(client, {})
        for events in accounts.values():
            events.discard(event)
        accounts.setdefault(account, weakref.WeakSet()).add(event)

    def wake(self, client: object, account: str | None = None, *, after: float = 0.0) -> None:
        """Set the events of `account`'s schedulers (None: every one), `after` seconds on."""
        accounts = self._by_client.get(client, {})
        events = [event for name, watching in list(accounts.items())
                  if account is None or name in ("", account) for event in list(watching)]
        for event in events:
            if after <= 0:
                event.set()
            else:
                asyncio.get_running_loop().call_later(after, event.set)


_CATCHUP_WAKES = _CatchupWakes()
# Reads end this often: the client's health-check PING still goes out, and a stop that redis-py
# swallowed inside a read is seen within this time (`raise_if_cancelling` after each read).
CATCHUP_LISTEN_S = 1.0
RESUBSCRIBE_S = 1.0  # after the subscription failed (Redis away)


def watch_catchups(redis: Redis, wake: asyncio.Event, account: str = "") -> None:
    """Have `announce_catchup` of `account` ("": of any) on this very client set `wake`
    directly (no Redis round trip); a second call moves it to another account."""
    _CATCHUP_WAKES.watch(redis, wake, account)


def wake_local_schedulers(redis: Redis, *, after: float) -> None:
    """Wake this instance's schedulers (`watch_catchups`) `after` seconds from now: a push
    deferred to the end of its interval is released by the first tick after that end, which
    must not be the next poll's (up to `scheduler.POLL_S` later). Only a hint, like a wake."""
    _CATCHUP_WAKES.wake(redis, after=after)


async def announce_catchup(redis: Redis, account_id: str) -> None:
    """Wake the schedulers for a new catch-up flag: this instance's at once (`watch_catchups`),
    every instance's through `PUBLISH reconcile:catchup-wake`. Only a hint: the flag is the
    truth, and a scheduler that missed the signal takes the flag at its next poll."""
    _CATCHUP_WAKES.wake(redis, account_id)
    await redis.publish(keys.CATCHUP_WAKE_CHANNEL, account_id)


async def relay_catchup_announcements(redis: Redis, wake: asyncio.Event | None = None) -> None:
    """Set `wake` (without one: wake the schedulers of the announced account watching this
    client, `watch_catchups`) on every `announce_catchup` of any instance, until cancelled or a
    RedisError. The subscription holds its own connection, closed on the way out. Also once
    subscribed (every scheduler): whatever was announced before that never reached us."""
    await initialized(redis)  # a cluster client's pub/sub needs its slot table

    def woken(account: str | None) -> None:
        if wake is not None:
            wake.set()
        else:
            _CATCHUP_WAKES.wake(redis, account)

    async with redis.pubsub(ignore_subscribe_messages=True) as sub:
        await sub.subscribe(keys.CATCHUP_WAKE_CHANNEL)
        woken(None)
        while True:
            message = await sub.get_message(ignore_subscribe_messages=True,
                                            timeout=CATCHUP_LISTEN_S)
            raise_if_cancelling()
            if message is not None:
                woken(text_of(message.get("data")))


@dataclass
class _Relay:
    task: asyncio.Task[None]
    users: int = 0


_RELAYS: dict[int, _Relay] = {}  # id(the Redis client) → its one relay


@contextlib.asynccontextmanager
async def catchup_wakes(redis: Redis, wake: asyncio.Event) -> AsyncIterator[None]:
    """While inside, `wake` is set on every catch-up announcement: this instance's at once
    (`watch_catchups`), every instance's through one subscription for all the schedulers of
    this client (`relay_catchup_announcements`, started by the first, stopped with the last).
    One per account's scheduler held a connection each of the client's pool of 100, which
    ran dry near 75 accounts: every Redis call of the instance failed (issue #37)."""
    watch_catchups(redis, wake)
    relay = _RELAYS.get(id(redis))
    if relay is None:
        relay = _RELAYS[id(redis)] = _Relay(asyncio.create_task(
            every(RESUBSCRIBE_S, lambda: relay_catchup_announcements(redis), log,
                  "catch-up wake subscription"), name="catch-up-wake"))
    relay.users += 1
    try:
        yield
    finally:
        relay.users -= 1
        if relay.users == 0:
            del _RELAYS[id(redis)]
            await cancel(relay.task)  # closes the subscription's connection
