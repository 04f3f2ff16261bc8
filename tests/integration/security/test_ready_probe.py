"""`/ready` against the real peers (Cyrus, the Bot API emulator): its peer probes are shared
and cached, so unauthenticated callers cannot turn it into traffic to the peers (issue #12).

Calls are counted on the peer side, nothing in the app is wrapped: the JMAP probe's connections
through a plain TCP relay in front of Cyrus (each probe opens its own connection), and getMe by
an emulator rule that lets exactly one getMe through and fails every later one with 500, so a
second getMe anywhere shows as a 503 naming `telegram`.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator

import httpx
import pytest
import redis.asyncio as aioredis
from fastapi import FastAPI

from messageweave.api import ops
from messageweave.mail.jmap import JmapClient
from messageweave.probes import READY_CACHE_TTL_S, READY_FAILURE_TTL_S, Shared, probe_ttl
from tests.helpers import (
    CYRUS_PASSWORD,
    CYRUS_USER,
    FakeClock,
    assert_envelope,
    login,
    running_client,
    sample_wire,
    settings_for,
)
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator

READY = {"status": "ready", "configured": True, "redis": True, "jmap": True,
         "telegram": True, "push": "off", "updates": "off"}
BURST = 200
# What the emulator's getMe answers (tests/peers/telegram_emulator/server.js, BOT_USER).
BOT_NAMES = ("TestNameBot", "Test First name")


class CountingRelay:
    """A TCP relay to Cyrus's HTTPS port that counts the connections made through it (TLS
    passes through untouched: the client still talks to Cyrus, with Cyrus's certificate)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.connections = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()

    @property
    def origin(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    async def __aenter__(self) -> CountingRelay:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        await self._server.wait_closed()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        pipes = [asyncio.create_task(self._pipe(reader, up_writer)),
                 asyncio.create_task(self._pipe(up_reader, writer))]
        self._pipes.update(pipes)
        try:
            await asyncio.gather(*pipes, return_exceptions=True)
        finally:
            self._pipes.difference_update(pipes)

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(ConnectionError, OSError):
                writer.close()


@pytest.fixture
async def relay(cyrus: CyrusServer, trust_cyrus: None) -> AsyncIterator[CountingRelay]:
    async with CountingRelay(int(cyrus.origin.rsplit(":", 1)[1])) as counting:
        yield counting


async def configure(client: httpx.AsyncClient, wire: dict[str, object]) -> None:
    saved = await client.put("/api/business-config", headers=await login(client), json=wire)
    assert saved.status_code == 200, saved.text


@pytest.fixture
async def clocked(
    embedded_redis_url: str, redis_client: aioredis.Redis,
) -> AsyncIterator[tuple[httpx.AsyncClient, FakeClock]]:
    """The app whose `/ready` keeps its peer probes' windows by a clock the test moves (the
    checks `api.ops` would make on first use, made here with that clock)."""
    clock = FakeClock()

    def hand_the_clock(app: FastAPI) -> None:
        checks = ops._ReadyChecks()
        checks.jmap = Shared(probe_ttl, clock=clock)
        checks.telegram = Shared(probe_ttl, clock=clock)
        app.state.ready_checks = checks

    async with running_client(settings_for(embedded_redis_url), prepare=hand_the_clock) as c:
        yield c, clock


async def test_a_burst_of_ready_costs_one_probe_per_peer_per_window(
    clocked: tuple[httpx.AsyncClient, FakeClock], relay: CountingRelay,
    telegram_emulator: TelegramEmulator,
) -> None:
    """Bug caught (issue #12): every `/ready` probed both peers itself: 120 requests made 120
    getMe calls carrying the bot token, 1,000 in parallel made 1,617 and answered false 503s
    (here also `redis`: each request's own Redis reads ran redis-py's pool of 100 dry). A burst
    now shares one probe per peer and one Redis check; after the window the next request
    probes again, and a failure is reused too, for its shorter window."""
    client, clock = clocked
    wire = peer_wire_through(relay, telegram_emulator)
    await configure(client, wire)
    token = str(wire["bot_token"])
    await telegram_emulator.fail(token=token, method="getMe", error_code=500, skip=1)
    before = relay.connections

    answers = await asyncio.gather(*(client.get("/ready") for _ in range(BURST)))
    refused = [(r.status_code, r.headers.get("x-ready-failed")) for r in answers
               if r.status_code != 200]
    assert refused == [], "a second getMe was made, or a false 503"
    assert all(r.json() == READY for r in answers)
    assert relay.connections - before == 1, "more than one JMAP session probe"

    clock.now += READY_CACHE_TTL_S + 0.3  # the window is over: both peers again
    after = await client.get("/ready")
    assert_envelope(after, 503, "service_unavailable")
    assert after.headers["x-ready-failed"] == "telegram"  # the rule's second getMe
    assert relay.connections - before == 2

    await telegram_emulator.clear_failures(token)  # getMe works again, but the failure…
    again = await client.get("/ready")
    assert again.status_code == 503 and again.headers["x-ready-failed"] == "telegram"  # …is kept
    clock.now += READY_FAILURE_TTL_S + 0.3
    recovered = await client.get("/ready")
    assert recovered.status_code == 200, recovered.headers.get("x-ready-failed")
    assert relay.connections - before == 2  # JMAP's pass is still within its window


async def test_a_configuration_change_probes_the_peers_again_at_once(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, relay: CountingRelay,
    telegram_emulator: TelegramEmulator,
) -> None:
    """Bug caught: a cache keyed on time alone would keep reporting the old configuration's
    peers as ready for a whole window after the operator saved a broken one."""
    wire = peer_wire_through(relay, telegram_emulator)
    await configure(client, wire)
    assert (await client.get("/ready")).status_code == 200
    await telegram_emulator.reject_token(str(wire["bot_token"]))
    assert (await client.get("/ready")).status_code == 200  # within the window: reused

    await configure(client, {**wire, "timezone": "Europe/Paris"})  # a new revision
    before = relay.connections
    response = await client.get("/ready")
    assert_envelope(response, 503, "service_unavailable")
    assert response.headers["x-ready-failed"] == "telegram"
    assert relay.connections - before == 1  # JMAP was probed again too


async def test_ready_tells_no_account_username_or_bot_name(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, cyrus: CyrusServer,
    relay: CountingRelay, telegram_emulator: TelegramEmulator,
) -> None:
    """Bug caught: an unauthenticated probe that echoed what the peers answered (the session's
    account id or username, the bot's name from getMe) would hand them to anyone; the answer is
    status booleans and the push label, and a 503 only names the failed checks."""
    async with JmapClient(cyrus.session_url, CYRUS_USER, CYRUS_PASSWORD,
                          ca_file=cyrus.ca_file) as jmap:
        await jmap.get_session()
        account_id = jmap.account_id
    wire = peer_wire_through(relay, telegram_emulator)
    await configure(client, wire)
    told = [account_id, CYRUS_USER, *BOT_NAMES, str(wire["bot_token"]),
               str(wire["jmap_password"]), str(relay.port), cyrus.origin]

    ready = await client.get("/ready")
    assert ready.json() == READY
    assert_tells_none(ready, told)

    await telegram_emulator.reject_token(str(wire["bot_token"]))
    await configure(client, {**wire, "jmap_password": "wrong-password"})
    refused = await client.get("/ready")
    assert_envelope(refused, 503, "service_unavailable")
    assert refused.headers["x-ready-failed"] == "jmap, telegram"
    assert_tells_none(refused, [*told, "wrong-password"])


def peer_wire_through(relay: CountingRelay, emulator: TelegramEmulator) -> dict[str, object]:
    """The Cyrus user and a fresh bot token, with JMAP reached through the counting relay and
    no periodic reconcile (nothing but the probes may reach the peers meanwhile)."""
    return sample_wire(jmap_session_url=relay.origin + "/", jmap_username=CYRUS_USER,
                       jmap_password=CYRUS_PASSWORD, telegram_api_base_url=emulator.base_url,
                       bot_token=f"{secrets.randbelow(10**9)}:{secrets.token_urlsafe(20)}",
                       reconcile_interval_s=0)


def assert_tells_none(response: httpx.Response, values: list[str]) -> None:
    """Neither the body nor a header (the request id aside: random hex) holds any of them."""
    headers = {k: v for k, v in response.headers.items() if k != "x-request-id"}
    for value in values:
        assert value not in response.text, value
        assert value not in str(headers), value
