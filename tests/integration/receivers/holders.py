"""EventSource holders run by a test itself (issue #32): an instance's `EventSourceHolder` on
the real Redis and a real `JmapClient`, and a stand-in for the scheduler that takes and counts
the catch-ups the holders ask for.

`Instance` wires by hand what the holder needs of a running instance (`mail.context.
MailContext`): the real Redis client, the real `ConfigStore` and `ConfigService` (its
configuration set directly, not loaded), a real `JmapClient`. Nothing in it is a double of a
peer; it only leaves out the app's other loops, so that a test decides which holders run and
with which lease.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from messageweave.aio import cancel
from messageweave.config.live import ConfigService
from messageweave.config.model import BusinessConfig, parse_wire
from messageweave.mail.eventsource import EventSourceHolder
from messageweave.mail.jmap import JmapClient
from messageweave.store import catchup, keys
from messageweave.store.config_store import ConfigStore
from messageweave.store.keys import AccountKeys
from messageweave.store.redis import Redis, connect
from tests.helpers import sample_wire, settings_for


@dataclass
class Instance:
    redis: Redis
    store: ConfigStore
    config: ConfigService
    client: JmapClient
    live: bool = True
    keys: AccountKeys = keys.DEFAULT

    @property
    def live_jmap(self) -> JmapClient | None:
        return self.client

    async def jmap(self) -> JmapClient:
        return self.client

    def secrets(self) -> list[str | None]:
        return []


@asynccontextmanager
async def instance(redis_url: str, client: JmapClient) -> AsyncIterator[Instance]:
    """An instance on `redis_url` whose configuration says `push_mode: eventsource`, switched
    on, talking JMAP through `client` (closed on the way out)."""
    redis = connect(redis_url)
    store = ConfigStore(redis)
    config = ConfigService(store, settings_for(redis_url).encryption_key)
    cfg: BusinessConfig = parse_wire(sample_wire(push_mode="eventsource"))
    config.config, config.revision = cfg, 1
    await store.set_enabled(True)
    try:
        async with client:
            yield Instance(redis, store, config, client)
    finally:
        await redis.aclose()


@asynccontextmanager
async def running(holder: EventSourceHolder) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(holder.run())
    try:
        yield task
    finally:
        await cancel(task)


@dataclass
class Catchups:
    """Takes every catch-up as soon as it is announced, the way a scheduler would, and counts
    them; `asked` is set at each one."""

    count: int = 0
    asked: asyncio.Event = field(default_factory=asyncio.Event)

    async def wait(self, timeout_s: float = 15.0) -> None:
        """Until a catch-up is asked that this call has not seen yet."""
        await asyncio.wait_for(self.asked.wait(), timeout_s)
        self.asked.clear()


@asynccontextmanager
async def taking_catchups(redis: Redis, account: str) -> AsyncIterator[Catchups]:
    seen = Catchups()
    subscribed = asyncio.Event()

    async def take() -> None:
        async with redis.pubsub(ignore_subscribe_messages=True) as sub:
            await sub.subscribe(keys.CATCHUP_WAKE_CHANNEL)
            subscribed.set()
            while True:
                message = await sub.get_message(timeout=1.0)
                if message is not None and await catchup.take_catchup(redis, account):
                    seen.count += 1
                    seen.asked.set()

    task = asyncio.create_task(take())
    try:
        await asyncio.wait_for(subscribed.wait(), 10)
        yield seen
    finally:
        with contextlib.suppress(Exception):
            await cancel(task)
