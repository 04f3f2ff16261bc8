"""The schedules' slots (`store.reconcile_state.claim_slot`): one instance per interval runs a
periodic job (the reconcile, the gap audit, push maintenance), on a real Redis."""

from __future__ import annotations

import time

import redis.asyncio as aioredis

from messageweave.store import keys
from messageweave.store.reconcile_state import claim_slot, slot_ms

SLOT = keys.RECONCILE_SCHEDULE


async def test_a_lowered_interval_is_in_force_from_the_next_check(
    redis_client: aioredis.Redis,
) -> None:
    """Catches: an owner who lowered `reconcile_interval_s` from 60 s to 10 s waited up to the
    old 60 s for the next periodic pass, since the slot taken under the old interval kept its
    expiry (found as `accounts/test_own_mail.py` failing under load: `default`, whose first pass
    took the slot before the test lowered the interval, got its mail 60 s late)."""
    assert (await claim_slot(redis_client, SLOT, 60)).claimed
    lowered = await claim_slot(redis_client, SLOT, 10)
    assert not lowered.claimed  # this interval's job is taken...
    assert 0 < await redis_client.pttl(SLOT) <= 10_000  # ...but ends within the new interval
    assert 0 < lowered.left_s <= 10  # and says so
    assert not (await claim_slot(redis_client, SLOT, 60)).claimed  # raising it does not
    assert await redis_client.pttl(SLOT) <= 10_000  # stretch this one


async def test_one_claim_per_interval(redis_client: aioredis.Redis) -> None:
    """Catches: two instances (or two ticks) both running one interval's job, or a slot that
    does not end at its own phase of the interval."""
    before = time.time()
    claims = [await claim_slot(redis_client, SLOT, 30) for _ in range(3)]
    assert [claim.claimed for claim in claims] == [True, False, False]
    ends = (await redis_client.pttl(SLOT)) / 1000 + time.time()
    assert all(abs(time.time() + claim.left_s - ends) < 0.5 for claim in claims)
    assert before + 14.9 < ends <= before + 45.1  # half an interval at least
    assert abs(ends - (before + slot_ms(SLOT, 30, before) / 1000)) < 0.5


async def test_slots_claimed_together_end_spread_over_the_interval(
    redis_client: aioredis.Redis,
) -> None:
    """Catches issue #37's synchronized passes: an instance that starts claims the periodic
    slot of each of its accounts in the same second, and each slot lasting one interval from
    its claim made 200 accounts' passes (and audits) hit the mail server and the instance
    together every minute (one mail of 30 +209 ms over the floor at 200 accounts). Each slot
    now ends at its key's own phase of the interval, whenever it is claimed."""
    slots = [keys.AccountKeys(f"acc{n:03}").of(keys.RECONCILE_SCHEDULE) for n in range(200)]
    for slot in slots:
        assert (await claim_slot(redis_client, slot, 60)).claimed
    left = {slot: await redis_client.pttl(slot) for slot in slots}
    ends = sorted(left.values())
    assert 29_000 < ends[0] < 40_000 and ends[-1] > 80_000  # over a whole minute (30–90 s)...
    busiest = max(sum(1 for e in ends if start <= e < start + 6_000) for start in ends)
    assert busiest < 50  # ...no tenth of it holding a quarter of them
    slot = max(slots, key=left.__getitem__)  # claimed again, it ends at the same phase
    phase_end = time.time() + left[slot] / 1000
    await redis_client.delete(slot)
    assert (await claim_slot(redis_client, slot, 60)).claimed
    assert abs(time.time() + await redis_client.pttl(slot) / 1000 - phase_end) < 0.5
