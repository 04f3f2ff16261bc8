"""The instance's Redis pool under a burst (issue #37): many accounts' first reads at once."""

from __future__ import annotations

import asyncio

from messageweave.store.redis import connect
from messageweave.store.redis_url import POOL_MAX_CONNECTIONS


async def test_a_burst_past_the_pool_waits_for_a_connection_rather_than_failing(
        embedded_redis_url: str) -> None:
    """Catches: the start-up burst of 150 accounts (each account's first pass reading Redis at
    once) failing with "Too many connections" once the pool's 100 connections were in use:
    an account's pass, its holder and the admin page's session check failed with it."""
    client = connect(embedded_redis_url)
    try:
        await client.set("burst", "1")
        burst = 150
        assert burst > POOL_MAX_CONNECTIONS
        # Each GET takes a connection of its own: none is back before the others ask.
        replies = await asyncio.gather(*(client.get("burst") for _ in range(burst)))
        assert replies == ["1"] * burst
        clients = await client.client_list()
        assert len(clients) <= POOL_MAX_CONNECTIONS + 1  # still bounded
    finally:
        await client.delete("burst")
        await client.aclose()
