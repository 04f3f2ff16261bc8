"""Two instances on one Redis and the real Cyrus EventSource (issue #32, finding 10's lease
mutant): one holder throughout, for longer than the lease.

The holders run with a 3 s lease (`EventSourceHolder(lease_s=…)`, the production one is
`keys.EVENTSOURCE_LOCK_TTL_S` = 15 s) so that the test outlives three leases in 9 s."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from messageweave.mail.eventsource import EventSourceHolder
from messageweave.mail.jmap import JmapClient
from messageweave.store import keys, receivers
from tests.helpers import FreshUser, eventually
from tests.integration.receivers.holders import instance, running
from tests.peers.cyrus import CyrusServer

LEASE_S = 3
WATCHED_S = 3 * LEASE_S


async def test_two_instances_keep_one_eventsource_holder_past_the_lease(
    embedded_redis_url: str, redis_client: aioredis.Redis, cyrus: CyrusServer, fresh: FreshUser,
) -> None:
    """Catches: the lease renewed too late (after its TTL, e.g. `RENEW_S` × 9): it lapses while
    the first instance still holds its EventSource connection, and the second one takes it and
    connects too. Watched for three leases, the lock must name the first holder every time."""
    def client() -> JmapClient:
        return JmapClient(cyrus.session_url, fresh.user, fresh.password, timeout=10,
                          verify=cyrus.ssl_context())

    async with instance(embedded_redis_url, client()) as a, \
            instance(embedded_redis_url, client()) as b:
        first = EventSourceHolder(a, lease_s=LEASE_S)
        async with running(first) as first_task:
            async def connected() -> bool:
                status = await receivers.read_status(redis_client, keys.EVENTSOURCE_STATUS)
                return status is not None and status.state == "connected"
            await eventually(connected, "the first instance connected to Cyrus's EventSource")
            holder = await redis_client.get(keys.EVENTSOURCE_LOCK)
            assert holder is not None
            async with running(EventSourceHolder(b, lease_s=LEASE_S)) as second_task:
                owners = []
                loop = asyncio.get_running_loop()
                end = loop.time() + WATCHED_S
                while loop.time() < end:
                    owners.append(await redis_client.get(keys.EVENTSOURCE_LOCK))
                    await asyncio.sleep(0.05)  # a sample of the lock, not a wait for an event
                assert not first_task.done() and not second_task.done()
            status = await receivers.read_status(redis_client, keys.EVENTSOURCE_STATUS)
    assert set(owners) == {holder}, f"{owners.count(holder)} of {len(owners)} samples"
    assert status is not None and status.state == "connected"
