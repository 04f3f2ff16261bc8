"""Many accounts on one instance (issue #37 item 3): what each account adds must not use up the
instance's shared resources (its Redis client's pool of 100 connections)."""

from __future__ import annotations

from messageweave.store import keys
from tests.helpers import eventually
from tests.integration.accounts.conftest import add_account
from tests.peers.cyrus import CyrusServer
from tests.served import ServedApp

ACCOUNTS = 4


async def test_the_accounts_schedulers_share_one_catch_up_subscription(
    served: ServedApp, cyrus: CyrusServer
) -> None:
    """Catches each account's scheduler subscribing to the catch-up wakes on a connection of
    its own: the instance's Redis client has a pool of 100 connections, and near 75 accounts
    (50 in the burst of a start) every Redis call of the instance failed with "Too many
    connections": its mail, its IDLE holder, the admin's sign-in (bench.many_accounts)."""
    async def subscribers() -> int:
        [(_, count)] = await served.redis.pubsub_numsub(keys.CATCHUP_WAKE_CHANNEL)
        return int(count)

    async def subscribed() -> bool:  # the instance's, once its scheduler runs
        return await subscribers() >= 1

    await eventually(subscribed, "the instance's catch-up subscription")
    # An app of an earlier test of this process may not have closed its own yet: what counts
    # is that the accounts add none.
    before = await subscribers()
    accounts = [await add_account(served, cyrus, f"acc{n}") for n in range(ACCOUNTS)]

    async def every_scheduler_ran() -> bool:  # each account's first pass wrote its cursor
        return await served.redis.exists(*(a.cursor for a in accounts)) == len(accounts)

    await eventually(every_scheduler_ran, "every account's first pass")
    assert await subscribers() <= before
