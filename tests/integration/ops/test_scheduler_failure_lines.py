"""The scheduler's failure lines (issue #15, item 6): a reconcile against a JMAP server that
refuses connections says what failed, why and what to check, once a minute with a count, and
its recovery once. Real scheduler tick, real Redis, a real refused port (`closed_port`), real
Cyrus for the recovery and for a real self-signed certificate. The clock of the failure lines
is injected, so the minute passes without sleeping; the periodic slot is released by deleting
its key, as its expiry would."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import redis.asyncio as aioredis

from messageweave import runtime
from messageweave.logs import RepeatLog
from messageweave.mail import scheduler
from messageweave.services import Services
from messageweave.store import keys
from tests.helpers import FreshUser, closed_port, sample_wire, settings_for
from tests.peers.cyrus import CyrusServer

PERIODIC = "periodic reconcile"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@asynccontextmanager
async def instance(redis_url: str, **wire: Any) -> AsyncIterator[Services]:
    """An instance switched on, its configuration `sample_wire(**wire)`."""
    services = runtime.build_services(settings_for(redis_url))
    try:
        await services.config.bootstrap(sample_wire(reconcile_interval_s=60, **wire))
        await services.store.set_enabled(True)
        yield services
    finally:
        await runtime.close(services)


@pytest.fixture
async def svc(embedded_redis_url: str, redis_client: aioredis.Redis) -> AsyncIterator[Services]:
    """An instance configured for a JMAP server on a closed port."""
    async with instance(embedded_redis_url,
                        jmap_session_url=f"https://127.0.0.1:{closed_port()}/") as services:
        yield services


async def _periodic_tick(svc: Services, redis: aioredis.Redis, timers: scheduler._Timers) -> None:
    """One scheduler tick that owns the periodic slot (as after the slot expired)."""
    await redis.delete(keys.RECONCILE_SCHEDULE)
    timers.next_slot_check = timers.periodic_ends = 0.0
    await scheduler._tick(svc, timers, lambda: 1.0e9)


def _lines(caplog: pytest.LogCaptureFixture, place: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(place)]


async def test_a_refused_jmap_server_is_logged_once_a_minute_with_a_remedy_then_recovered(
    svc: Services, redis_client: aioredis.Redis, cyrus: CyrusServer, fresh: FreshUser,
    trust_cyrus: None, caplog: pytest.LogCaptureFixture,
) -> None:
    """Catches `periodic reconcile failed: JmapTransportError` every pass with no detail and
    no remedy (the report): the first failure names class, reason and what to check; one
    10 s later logs nothing; the first after the minute carries the count; the first good
    pass logs its recovery once, the next good pass nothing."""
    caplog.set_level(logging.INFO, logger="messageweave.mail.scheduler")
    clock = Clock()
    timers = scheduler._Timers(failures=RepeatLog(scheduler.log, clock=clock))

    await _periodic_tick(svc, redis_client, timers)
    (first,) = _lines(caplog, PERIODIC)
    assert first.startswith("periodic reconcile failed: JmapTransportError: JMAP session "
                            f"request to https://127.0.0.1:{closed_port()} failed: ConnectError")
    assert first.endswith("; hint: could not reach the JMAP server: check jmap_session_url and "
                          "that the server is up")

    clock.now += 10
    await _periodic_tick(svc, redis_client, timers)
    assert len(_lines(caplog, PERIODIC)) == 1

    clock.now += 51
    await _periodic_tick(svc, redis_client, timers)
    third = _lines(caplog, PERIODIC)[-1]
    assert third.startswith("periodic reconcile failed: JmapTransportError")
    assert third.endswith("(2 times in the last 61 s)")

    await svc.config.save_patch({"jmap_session_url": cyrus.origin + "/",
                                 "jmap_username": fresh.user, "jmap_password": fresh.password})
    await _periodic_tick(svc, redis_client, timers)
    await _periodic_tick(svc, redis_client, timers)
    lines = _lines(caplog, PERIODIC)
    assert lines[2:] == ["periodic reconcile recovered after 3 failure(s)"], lines


async def test_a_self_signed_jmap_server_points_at_jmap_ca_pem(
    embedded_redis_url: str, redis_client: aioredis.Redis, cyrus: CyrusServer,
    fresh: FreshUser, caplog: pytest.LogCaptureFixture,
) -> None:
    """Catches a certificate failure logged like any unreachable server: Cyrus's self-signed
    certificate (not trusted here) must lead to the field that fixes it."""
    caplog.set_level(logging.INFO, logger="messageweave.mail.scheduler")
    timers = scheduler._Timers(failures=RepeatLog(scheduler.log, clock=Clock()))
    async with instance(embedded_redis_url, jmap_session_url=cyrus.origin + "/",
                        jmap_username=fresh.user, jmap_password=fresh.password) as svc:
        await _periodic_tick(svc, redis_client, timers)
    (line,) = _lines(caplog, PERIODIC)
    assert "CERTIFICATE_VERIFY_FAILED" in line
    assert "; hint: the JMAP server's certificate is not trusted: paste it" in line
    assert "jmap_ca_pem" in line
