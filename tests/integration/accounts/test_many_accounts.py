"""Many accounts on one instance (issue #37 item 3): what each account adds must not use up the
instance's shared resources (its Redis client's pool of 100 connections)."""

from __future__ import annotations

import asyncio
import time

from messageweave.store import keys
from tests.helpers import eventually
from tests.integration.accounts.conftest import add_account
from tests.peers.cyrus import CyrusServer
from tests.served import ServedApp

ACCOUNTS = 4
# A window as long as the flag's poll grid (`scheduler.POLL_S`): the upkeep of every account
# comes together on the grids of 5, 10 and 15 s (`store.together.on_grid`), so a shorter window
# held one burst of it or none (3 s measured 0.1 to 4.9 a second per account).
IDLE_S = 10.0
# What each idle account adds (~26 before issue #37, ~7 after its first step, about 1 here after
# its second: 2.9 at 200 IMAP accounts in bench.many_accounts): its scheduler's flag poll and
# slot checks, its holders' lease renewals, and its share of the worker's two pipelined
# questions (the heartbeats, the maintenance pass's XPENDING and ZCOUNT of every stream). The
# first step's per-stream upkeep (XINFO, XPENDING, XAUTOCLAIM, ZRANGEBYSCORE, a heartbeat SET
# each, ~4.5 a second) alone is over this.
IDLE_COMMANDS_PER_S = 4.0


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


async def _commands_per_s(served: ServedApp, seconds: float) -> float:
    """Redis's commands a second over `seconds` of the instance (INFOs left out)."""
    async def total() -> int:
        stats = await served.redis.info("commandstats")
        return sum(int(v["calls"]) for name, v in stats.items() if name != "cmdstat_info")

    before, started = await total(), time.monotonic()
    await asyncio.sleep(seconds)  # a window of idle time, measured: not a wait for an event
    return (await total() - before) / (time.monotonic() - started)


async def test_an_idle_account_costs_the_instance_a_few_redis_commands_a_second(
    served: ServedApp, cyrus: CyrusServer
) -> None:
    """Catches the polling that made every idle account cost its instance ~25 Redis commands a
    second (its scheduler's tick every 0.2 s, its auditor's and slot checks every second, the
    registry's read of every account 4 times a second): at 200 accounts a fifth of a core of
    an instance that had no mail to deliver (bench.many_accounts, issue #37)."""
    async def first_pass() -> bool:
        return await served.redis.exists(keys.RECONCILE_CURSOR) == 1

    await eventually(first_pass, "default's first pass")
    alone = await _commands_per_s(served, IDLE_S)
    accounts = [await add_account(served, cyrus, f"idle{n}") for n in range(ACCOUNTS)]

    async def every_first_pass() -> bool:
        return await served.redis.exists(*(a.cursor for a in accounts)) == len(accounts)

    await eventually(every_first_pass, "every account's first pass")
    per_account = (await _commands_per_s(served, IDLE_S) - alone) / ACCOUNTS
    assert per_account <= IDLE_COMMANDS_PER_S, f"{per_account:.1f} commands/s per account"
