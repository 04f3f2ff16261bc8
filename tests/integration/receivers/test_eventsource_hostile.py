"""The EventSource holder against a mail server that misbehaves (issue #32, findings 4 and 5,
and finding 10's `EmailDelivery` mutant).

The server is the test's own (`hostile_sse`, asyncio on 127.0.0.1): none of these can be
produced with Cyrus, whose stream is its own pings and StateChanges (and which never sends
`EmailDelivery`, even when asked for `types=*`). Everything else is real: the holder, the JMAP
client and its httpx connection, Redis.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import redis.asyncio as aioredis

from messageweave.mail.eventsource import EventSourceHolder
from messageweave.mail.jmap import JmapClient
from messageweave.store.receivers import read_status
from tests.helpers import eventually
from tests.integration.receivers.holders import Instance, instance, running, taking_catchups
from tests.integration.receivers.hostile_sse import (
    ACCOUNT,
    HostileEventSource,
    Writer,
    accept_close,
    endless_data,
    endless_line,
    scripted,
    state_event,
)

MIB = 1024 * 1024
WINDOW_S = 8.0


def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@asynccontextmanager
async def holding(server: HostileEventSource, redis_url: str) -> AsyncIterator[Instance]:
    """One instance holding the server's EventSource."""
    client = JmapClient(server.url, "hostile", "secret", allow_insecure_http=True, timeout=10)
    async with instance(redis_url, client) as inst, running(EventSourceHolder(inst)):
        yield inst


@pytest.mark.parametrize("behaviour", [endless_line, endless_data],
                         ids=["endless-line", "endless-data-lines"])
async def test_an_endless_line_or_event_is_cut_and_memory_stays_bounded(
    embedded_redis_url: str, redis_client: aioredis.Redis, behaviour: Writer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Catches: the stream read with `aiter_lines()` (no line limit) and data lines kept until
    a blank line, so a line that never ends (or an event that never ends) grew the process by
    1.5 GB in 7 s while the silence timer never fired. The holder must hang up after at most a
    few MiB (the cap, 64 KiB, plus what the sockets buffer), reconnect, and log the failure
    without the server's text."""
    caplog.set_level(logging.WARNING, logger="messageweave.mail.eventsource")
    before = rss_bytes()
    async with HostileEventSource(behaviour) as server, holding(server, embedded_redis_url):
        await server.until_connections(1)
        first = server.connections[0]
        await asyncio.wait_for(first.closed_by_client.wait(), 20)
        grown = rss_bytes() - before
        await server.until_connections(2, 20)
    assert first.written <= 16 * MIB, first.written
    assert grown <= 32 * MIB, grown
    failures = [r.getMessage() for r in caplog.records if "eventsource failed" in r.getMessage()]
    assert failures and "longer than 65536" in failures[0], failures
    assert not any("xxxx" in r.getMessage() for r in caplog.records)


async def test_a_server_that_accepts_and_closes_is_backed_off(
    embedded_redis_url: str, redis_client: aioredis.Redis, caplog: pytest.LogCaptureFixture,
) -> None:
    """Catches: the backoff reset on `open`, so a server that accepts and closes at once got
    38 connections and 38 catch-up passes in 30 s. Only a ping or an event proves a
    connection; over `WINDOW_S` a backoff of 0.5-1, 1-2, 2-4, 4-8 s allows at most five
    connections (a reset one: eight or more), and the reconnects ask for at most one catch-up
    per `RECONNECT_CATCHUP_S` (10 s). The failures are logged once, not once per connection."""
    caplog.set_level(logging.WARNING, logger="messageweave.mail.eventsource")
    async with HostileEventSource(accept_close) as server, \
            taking_catchups(redis_client, ACCOUNT) as catchups, \
            holding(server, embedded_redis_url):
        await server.until_connections(1)
        start = server.connections[0].opened
        await asyncio.sleep(WINDOW_S)  # the window the connections are counted over
        in_window = [c for c in server.connections if c.opened - start <= WINDOW_S]
        asked = catchups.count
    assert len(in_window) <= 5, [round(c.opened - start, 2) for c in in_window]
    assert asked == 1
    failures = [r for r in caplog.records if "eventsource failed" in r.getMessage()]
    assert len(failures) == 1, [r.getMessage() for r in failures]


async def test_an_email_delivery_state_change_asks_for_a_catchup(
    embedded_redis_url: str, redis_client: aioredis.Redis,
) -> None:
    """Catches: `EmailDelivery` state events ignored (finding 10's mutant): a server that
    reports a delivery only as `EmailDelivery` (RFC 8621 §1.5) would bring no mail until the
    periodic pass. The holder asks only for `types=Email` (every delivery changes the Email
    state; Cyrus sends nothing else), and acts on an `EmailDelivery` the server sends anyway."""
    async with HostileEventSource(scripted) as server, \
            taking_catchups(redis_client, ACCOUNT) as catchups, \
            holding(server, embedded_redis_url):
        await catchups.wait()  # the connect's own catch-up
        server.events.put_nowait(state_event({"another-account": {"Email": "9"}}))
        server.events.put_nowait(state_event({ACCOUNT: {"EmailDelivery": "d1"}}))
        await catchups.wait()
    assert catchups.count == 2
    assert server.paths[-1].startswith("/es?types=Email&closeafter=no&ping=30"), server.paths


async def test_an_event_source_url_on_another_origin_is_reported_as_a_bad_url(
    embedded_redis_url: str, redis_client: aioredis.Redis,
) -> None:
    """Catches a session's `eventSourceUrl` on another origin (refused: the credentials would
    go there) reported as anything but `bad_url` (the page's and `/ready`'s "the server's push
    address is on another host"), or connected to. A guard of issue #38 item 5: the state was
    told by the error's words (`"origin" in str(exc)`), now by its type (`JmapOffOriginError`),
    so a reworded message cannot flip it; the behaviour is the same before and after."""
    async with HostileEventSource(accept_close,
                                  event_source_origin="http://127.0.0.2:9") as server:
        client = JmapClient(server.url, "hostile", "secret", allow_insecure_http=True,
                            timeout=10)
        async with instance(embedded_redis_url, client) as inst:
            holder = EventSourceHolder(inst)
            async with running(holder):
                async def reported() -> bool:
                    status = await read_status(redis_client, holder.status_key)
                    return status is not None and status.state not in ("", "connecting")

                await eventually(reported, "the holder's first report")
                status = await read_status(redis_client, holder.status_key)
    assert status is not None and status.state == "bad_url", status
    assert server.connections == []
