"""The push holders' status outlives their own waits (issue #34): the EventSource holder and
the IMAP IDLE holder (`mail.holder.LeaseHolder`) in a backoff longer than their status key's
EX still say what they wait for, as the Telegram poller does (`test_polling_status`).

The mail server is a closed loopback port (the connection is refused for real); the holder,
its lease and its status are the real ones on the real Redis. The TTL and the backoff are
scaled down: a wait three times the status's EX, as a connect that hangs until a long
`jmap_timeout_ms` and then a 60 s backoff is at full scale.
"""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from messageweave.mail import eventsource
from messageweave.mail.eventsource import EventSourceHolder
from messageweave.mail.imap import idle
from messageweave.mail.imap.idle import IdleHolder
from messageweave.mail.jmap import JmapClient
from messageweave.store import keys
from messageweave.store.receivers import read_status
from tests.helpers import closed_port, eventually, sample_wire
from tests.integration.imap.test_idle import _instance
from tests.integration.receivers.holders import instance, running

TTL_S = 2  # the status key's EX, scaled down from 120 s
BACKOFF_BASE_S = 16.0  # the first backoff: 8-16 s, at least four times the EX
WATCHED_S = 3 * TTL_S  # how long the status is watched inside the wait


async def _watch_status(redis: aioredis.Redis, key: str) -> list[str | None]:
    """The holder's state, sampled from the moment it reports `failing` for `WATCHED_S`."""

    async def failing() -> bool:
        status = await read_status(redis, key)
        return status is not None and status.state == "failing"

    await eventually(failing, f"{key} says failing", timeout_s=15)
    seen: list[str | None] = []
    loop = asyncio.get_running_loop()
    end = loop.time() + WATCHED_S
    while loop.time() < end:
        status = await read_status(redis, key)
        seen.append(None if status is None else status.state)
        await asyncio.sleep(0.1)  # a sample of the key over the window, not a wait for an event
    return seen


async def test_the_eventsource_status_outlives_a_backoff_longer_than_its_ttl(
    embedded_redis_url: str, redis_client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches: the EventSource holder's status written once before its backoff (up to 60 s
    after a failed connect that may itself last `jmap_timeout_ms`, up to 300 s) and expiring
    during it, so `/ready` and the page said "no instance holds the EventSource yet" while the
    holder was there, retrying a mail server that refused it."""
    monkeypatch.setattr(EventSourceHolder, "status_ttl_s", TTL_S)
    monkeypatch.setattr(eventsource, "BACKOFF_BASE_S", BACKOFF_BASE_S)
    client = JmapClient(f"http://127.0.0.1:{closed_port()}/.well-known/jmap", "alice",
                        "secret", allow_insecure_http=True, timeout=2)
    async with instance(embedded_redis_url, client) as inst, \
            running(EventSourceHolder(inst)):  # type: ignore[arg-type]
        seen = await _watch_status(redis_client, keys.EVENTSOURCE_STATUS)
    assert set(seen) == {"failing"}, seen


async def test_the_imap_idle_status_outlives_a_backoff_longer_than_its_ttl(
    embedded_redis_url: str, redis_client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches: the IMAP IDLE holder's status expiring during its backoff after a refused
    connection (the same shared holder as the EventSource's), so the page said "no instance
    holds the IMAP IDLE yet" in the middle of a mail server outage."""
    monkeypatch.setattr(IdleHolder, "status_ttl_s", TTL_S)
    monkeypatch.setattr(idle, "BACKOFF_BASE_S", BACKOFF_BASE_S)
    wire = sample_wire(mail_source="imap", imap_host="127.0.0.1", imap_port=closed_port(),
                       imap_security="tls", imap_username="alice", imap_password="secret")
    async with _instance(embedded_redis_url, wire) as inst, \
            running(IdleHolder(inst)):  # type: ignore[arg-type]
        seen = await _watch_status(redis_client, keys.IMAP_IDLE_STATUS)
    assert set(seen) == {"failing"}, seen
