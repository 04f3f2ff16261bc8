"""One poller in the cluster, and another one when it dies (issue #22): two real
`messageweave serve` processes on one Redis, the polling one killed with SIGKILL while the owner
writes; and an instance that crashes between queueing updates and storing the offset."""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.pipeline import polling
from messageweave.store import keys, receivers
from messageweave.store.locks import Lock
from messageweave.store.streams import StreamStore
from tests.helpers import ADMIN_KEY, WAIT_S, configure, console_script, eventually, free_port
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator
from tests.served import ServedApp, lift_limits, peer_wire

BURST = 50


@asynccontextmanager
async def serve(redis_url: str) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """A `messageweave serve` process, healthy when the block starts; (process, base URL)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG_ENABLED", "DEBUG_TOKEN")}
    env.update(REDIS_URL=redis_url, CONFIG_ENCRYPTION_KEY=ADMIN_KEY, PORT=str(port))
    proc = await asyncio.create_subprocess_exec(
        console_script("messageweave"), "serve", "--host", "127.0.0.1", env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as http:
            async def healthy() -> bool:
                assert proc.returncode is None, "serve exited early"
                try:
                    return (await http.get(url + "/healthz", timeout=1)).status_code == 200
                except httpx.HTTPError:
                    return False
            await eventually(healthy, "serve answering /healthz")
        yield proc, url
    finally:
        if proc.returncode is None:
            proc.terminate()
        await asyncio.wait_for(proc.wait(), 20)


def _answered(texts: list[str]) -> Counter[str]:
    return Counter(t.split("「", 1)[1].split("」", 1)[0] for t in texts if "「" in t)


async def _write(emulator: TelegramEmulator, token: str, chat: int, numbers: range) -> None:
    for n in numbers:
        await emulator.send_user_message(token, chat, f"/search k{n}")


async def test_a_killed_poller_is_replaced_and_nothing_is_lost_or_doubled(
    embedded_redis_url: str, redis_client: aioredis.Redis, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> None:
    """Catches: a poller lease that outlives its instance (the bot deaf after a crash), two
    instances polling at once (each ending the other's call with 409), and updates lost or
    answered twice across the takeover.

    The first instance is killed while it holds the lease and long-polls, with half the burst
    answered and the other half sent right after the kill. It is killed with nothing of its
    own in flight (the stream worked off), because a kill between a worker's sendMessage and
    its commit is the worker's at-least-once window (reference §1.3.1), not the poller's; the
    poller's own crash window is the next test's."""
    await lift_limits(redis_client)
    wire = peer_wire(cyrus, telegram_emulator, telegram_updates="auto")
    token, chat = wire["bot_token"], wire["telegram_chat_id"]
    async with serve(embedded_redis_url) as (first, first_url):
        async with httpx.AsyncClient(base_url=first_url, timeout=15) as api:
            await configure(api, wire, applied=True)

        async def polling_now() -> bool:
            status = await receivers.read_status(redis_client, keys.UPDATES_STATUS)
            return status is not None and status.state == "polling"
        await eventually(polling_now, "the first instance polling")
        async with serve(embedded_redis_url) as (second, _):
            holder = await redis_client.get(keys.TELEGRAM_POLL_LOCK)
            await _write(telegram_emulator, token, chat, range(BURST // 2))

            async def first_half() -> bool:
                texts = [m.text for m in await telegram_emulator.sent_messages(token, chat)]
                return (len(_answered(texts)) == BURST // 2
                        and await redis_client.xlen(keys.STREAM_TELEGRAM) == 0
                        and (await telegram_emulator.pending_updates(token)).polling)
            await eventually(first_half, "the first half answered")
            assert await redis_client.get(keys.TELEGRAM_POLL_LOCK) == holder  # still the first
            first.send_signal(signal.SIGKILL)
            await first.wait()
            await _write(telegram_emulator, token, chat, range(BURST // 2, BURST))

            async def all_answered() -> bool:
                texts = [m.text for m in await telegram_emulator.sent_messages(token, chat)]
                return len(_answered(texts)) == BURST
            # The dead lease expires (10 s), the survivor takes it within a third of that.
            await eventually(all_answered, "every message answered", WAIT_S + 15)

            async def drained() -> bool:
                return await redis_client.xlen(keys.STREAM_TELEGRAM) == 0
            await eventually(drained, "the stream worked off")
            texts = [m.text for m in await telegram_emulator.sent_messages(token, chat)]
            counts = _answered(texts)
            assert set(counts) == {f"k{n}" for n in range(BURST)}
            assert [q for q, c in counts.items() if c != 1] == [], counts
            assert await redis_client.get(keys.TELEGRAM_POLL_LOCK) not in (None, holder)
            assert second.returncode is None


@pytest.mark.parametrize("dies", ["before_the_xadd", "after_the_xadd"])
async def test_a_poller_that_dies_mid_batch_loses_and_doubles_nothing(
    polled: ServedApp, monkeypatch: pytest.MonkeyPatch, dies: str,
) -> None:
    """Catches: an offset stored (so confirmed to Telegram) before its updates are queued
    (dying before the XADD then loses them), and updates queued twice when the poller that
    takes over is handed them again (dying after the XADD, before the offset is stored).

    A test double, because the moment cannot be produced for real (a kill -9 lands there only
    by chance): the first script run, or the first offset write, fails as if the process died
    there. The next try must get the same updates from Telegram and answer each one once."""
    crashes: list[str] = []
    if dies == "before_the_xadd":
        real_enqueue = StreamStore.enqueue_updates_if_enabled

        async def enqueue(self: StreamStore, updates: list[tuple[int, dict[str, str]]]
                          ) -> list[str | None]:
            if not crashes:
                crashes.append(dies)
                raise ConnectionResetError("the instance died before its XADD")
            return await real_enqueue(self, updates)
        monkeypatch.setattr(StreamStore, "enqueue_updates_if_enabled", enqueue)
    else:
        real_save = receivers.save_offset

        async def save(redis: aioredis.Redis, lock: Lock, token: str, offset: int) -> bool:
            if not crashes:
                crashes.append(dies)
                raise ConnectionResetError("the instance died right after its XADD")
            return await real_save(redis, lock, token, offset)
        monkeypatch.setattr(polling, "save_offset", save)
    await _write(polled.emulator, polled.token, polled.chat, range(5))

    async def drained() -> bool:
        texts = [m.text for m in await polled.emulator.sent_messages(polled.token, polled.chat)]
        return (len(_answered(texts)) == 5
                and await polled.redis.xlen(keys.STREAM_TELEGRAM) == 0)
    await eventually(drained, "every message answered")
    assert crashes == [dies]
    texts = [m.text for m in await polled.emulator.sent_messages(polled.token, polled.chat)]
    assert sorted(_answered(texts).items()) == [(f"k{n}", 1) for n in range(5)]
    assert (await polled.emulator.pending_updates(polled.token)).pending == []


async def test_a_poller_whose_lease_expired_cannot_move_the_offset(
    redis_client: aioredis.Redis,
) -> None:
    """Catches `SAVE_OFFSET` without its lease check (issue #32, finding 10: no test ran it
    with a lease that was no longer ours). A poller paused past its lease (a GC pause, a
    partition) while another instance took over must not store its offset: it would confirm
    to Telegram updates the new holder has not queued, or move the offset under it."""
    token = "123456:ABC"
    paused = Lock(redis_client, keys.TELEGRAM_POLL_LOCK, keys.TELEGRAM_POLL_LOCK_TTL_S)
    assert await paused.acquire()
    assert await receivers.save_offset(redis_client, paused, token, 10)
    await redis_client.pexpire(keys.TELEGRAM_POLL_LOCK, 1)  # the lease runs out in Redis

    async def expired() -> bool:
        return not await redis_client.exists(keys.TELEGRAM_POLL_LOCK)
    await eventually(expired, "the paused poller's lease to expire")
    taker = Lock(redis_client, keys.TELEGRAM_POLL_LOCK, keys.TELEGRAM_POLL_LOCK_TTL_S)
    assert await taker.acquire()
    assert await receivers.save_offset(redis_client, taker, token, 12)
    assert not await receivers.save_offset(redis_client, paused, token, 15)
    assert await receivers.read_offset(redis_client, token) == 12
