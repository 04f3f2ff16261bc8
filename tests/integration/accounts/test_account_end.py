"""A deleted account's end (issue #35, SPEC G.3): its keys are gone within 60 s, whatever was
still running when it was deleted, and its id is not reused meanwhile."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.store import keys
from messageweave.store.account_sweep import run_account_sweep, sweep_once
from messageweave.store.keys import AccountKeys
from messageweave.store.reconcile_state import reconcile_lock
from tests.helpers import all_keys, assert_envelope, eventually
from tests.integration.test_accounts import family_wire, with_family

FAMILY = AccountKeys("family")
STREAM = FAMILY.stream_jmap
# A window of its own for these tests (the service's is 60 s, `keys.ACCOUNT_DELETE_WINDOW_S`):
# the sweep's passes and its end come as they would, only sooner, yet after the app's own loops
# of the account have stopped (within two reload ticks, 2 s, with room for a busy machine), as
# the service's window is.
WINDOW_S, INTERVAL_S = 5.0, 0.05


@pytest.fixture
async def sweeping(redis_client: aioredis.Redis) -> AsyncIterator[None]:
    """The deleted accounts' sweep, with the short window (the app's own sweep runs too, with
    the service's window: it never ends a tombstone before this one does)."""
    task = asyncio.create_task(run_account_sweep(redis_client, window_s=WINDOW_S,
                                                 interval_s=INTERVAL_S))
    yield
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def _write_as_a_late_pass(redis: aioredis.Redis) -> str:
    """What a pass, the worker and a button press of `family` still running on some instance
    write after the deletion: the reconcile lease, a new mail's claim and stream entry, the
    cursor, the entry's ledger lease and its waiting set, an unknown-after-send record."""
    assert await reconcile_lock(redis, FAMILY).acquire()
    entry = await redis.xadd(STREAM, {"email_id": "M1"})
    await redis.set(FAMILY.dedup_jmap("u1", "M1"), entry)
    await redis.set(FAMILY.of(keys.RECONCILE_CURSOR), "state-after-delete")
    await redis.set(keys.delivery_inflight(STREAM, entry), "lease")
    await redis.zadd(keys.delivery_waiting("telegram", STREAM), {f"{STREAM}/{entry}": 1})
    await redis.zadd(keys.DELIVERY_UNKNOWN, {f"{STREAM}/{entry}/sent": 1})
    return str(entry)


# Another account's key that holds `family`'s prefix further on (a mail id can be any text).
WORKS = "a:{work}:dedup:jmap:u1:a:{family}:x"


async def _family_keys(redis: aioredis.Redis) -> list[str]:
    return [k for k in await all_keys(redis, "*a:{family}:*") if k != WORKS]


async def test_what_a_late_pass_writes_after_the_delete_is_gone_within_the_window(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, sweeping: None,
) -> None:
    """Catches a deleted account whose keys come back for good: a pass, the worker or a
    button press still running when the DELETE answered writes a cursor, a claim, a stream
    entry, a lease after it, and nothing deletes them (the next account of that id would start
    from the old mailbox's cursor and claims). Also catches a sweep that deletes another
    account's key or `default`'s."""
    admin = await with_family(client)
    others = {WORKS: "work's claim (another tag)",
              keys.RECONCILE_CURSOR: "default's cursor"}
    for key, value in others.items():
        await redis_client.set(key, value)
    assert (await client.delete("/api/accounts/family", headers=admin)).status_code == 204
    entry = await _write_as_a_late_pass(redis_client)
    assert len(await _family_keys(redis_client)) >= 6

    async def swept() -> bool:
        return not await _family_keys(redis_client) \
            and not await redis_client.exists(keys.ACCOUNTS_DELETED)
    await eventually(swept, "family's keys and tombstone gone", timeout_s=WINDOW_S + 5)
    assert await redis_client.zscore(keys.DELIVERY_UNKNOWN, f"{STREAM}/{entry}/sent") is None
    for key, value in others.items():
        assert await redis_client.get(key) == value
    again = await client.post("/api/accounts", headers=admin, json=family_wire())
    assert again.status_code == 201, again.text
    assert await redis_client.get(FAMILY.of(keys.RECONCILE_CURSOR)) is None


async def test_an_id_being_swept_cannot_be_created_again(
    client: httpx.AsyncClient, redis_client: aioredis.Redis,
) -> None:
    """Catches a create of a deleted account's id before its sweep ended: the old account's
    late writes (its cursor, its claims) would land in the new account, whose mail would then
    be skipped or notified from the wrong mailbox. The answer says when to try again."""
    admin = await with_family(client)
    assert (await client.delete("/api/accounts/family", headers=admin)).status_code == 204
    refused = await client.post("/api/accounts", headers=admin, json=family_wire())
    assert_envelope(refused, 409, "conflict")
    assert 1 <= int(refused.headers["retry-after"]) <= keys.ACCOUNT_DELETE_WINDOW_S
    assert await redis_client.smembers(keys.ACCOUNTS_INDEX) == set()
    assert [a["id"] for a in (await client.get("/api/accounts", headers=admin)
                              ).json()["accounts"]] == ["default"]
    late = int(time.time() * 1000) + keys.ACCOUNT_DELETE_WINDOW_S * 1000
    assert await sweep_once(redis_client, now_ms=late) == ["family"]
    again = await client.post("/api/accounts", headers=admin, json=family_wire())
    assert again.status_code == 201, again.text


async def test_a_deletion_cut_short_leaves_the_account_whole(
    client: httpx.AsyncClient, redis_client: aioredis.Redis,
) -> None:
    """Catches a sweep that deletes a live account: an instance killed after it wrote the
    tombstone and before the configuration went answered no 204, and the account must stay
    as it was (the tombstone just ends). Written as that killed DELETE left it: the kill
    between two round trips cannot be aimed at from a test."""
    admin = await with_family(client)
    before = await _family_keys(redis_client)
    await redis_client.zadd(keys.ACCOUNTS_DELETED, {"family": int(time.time() * 1000)})
    late = int(time.time() * 1000) + keys.ACCOUNT_DELETE_WINDOW_S * 1000
    assert await sweep_once(redis_client, now_ms=late) == ["family"]
    assert await _family_keys(redis_client) == before
    assert (await client.get("/api/accounts/family", headers=admin)).status_code == 200
    assert not await redis_client.exists(keys.ACCOUNTS_DELETED)
