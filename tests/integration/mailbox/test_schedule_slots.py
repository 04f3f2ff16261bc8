"""The schedules' slots (`store.reconcile_state.claim_slot`): one instance per interval runs a
periodic job (the reconcile, the gap audit, push maintenance), on a real Redis."""

from __future__ import annotations

import redis.asyncio as aioredis

from messageweave.store import keys
from messageweave.store.reconcile_state import claim_slot

SLOT = keys.RECONCILE_SCHEDULE


async def test_a_lowered_interval_is_in_force_from_the_next_check(
    redis_client: aioredis.Redis,
) -> None:
    """Catches: an owner who lowered `reconcile_interval_s` from 60 s to 10 s waited up to the
    old 60 s for the next periodic pass, since the slot taken under the old interval kept its
    expiry (found as `accounts/test_own_mail.py` failing under load: `default`, whose first pass
    took the slot before the test lowered the interval, got its mail 60 s late)."""
    assert await claim_slot(redis_client, SLOT, 60)
    assert not await claim_slot(redis_client, SLOT, 10)  # this interval's job is taken...
    assert 0 < await redis_client.pttl(SLOT) <= 10_000  # ...but ends within the new interval
    assert not await claim_slot(redis_client, SLOT, 60)  # raising it does not stretch this one
    assert await redis_client.pttl(SLOT) <= 10_000


async def test_one_claim_per_interval(redis_client: aioredis.Redis) -> None:
    """Catches: two instances (or two ticks) both running one interval's job."""
    assert [await claim_slot(redis_client, SLOT, 30) for _ in range(3)] == [True, False, False]
    assert 29_000 < await redis_client.pttl(SLOT) <= 30_000
