"""Which client a failed credential counts against behind the gateway: the process settings
`TRUSTED_PROXY_HEADER` and `TRUSTED_PROXIES` (reference §3.4, §4; docs/security.md §4), read
by `from_env` and wired by `create_app` into `Services.client_address`, against a real Redis."""

from __future__ import annotations

import httpx
import pytest
import redis.asyncio as aioredis
from starlette.requests import Request

from messageweave.api.throttle import ClientAddressPolicy, client_of
from messageweave.settings import Settings, from_env
from messageweave.store import keys
from tests.helpers import ADMIN_KEY, assert_envelope, running_client

HEADER = "x-mw-client-ip"
GATEWAY = ("10.20.30.40", 40000)  # the socket peer of every request the gateway forwards
ELSEWHERE = ("203.0.113.50", 40001)  # a peer that reached the backend around the gateway
GUESSER = "198.51.100.7"
OPERATOR = "192.0.2.44"
WRONG = {"Authorization": "Bearer not-the-token"}


def _settings(redis_url: str, **env: str) -> Settings:
    """Through `from_env`, as `messageweave serve` reads them."""
    return from_env({"REDIS_URL": redis_url, "CONFIG_ENCRYPTION_KEY": ADMIN_KEY, **env})


async def _guess(client: httpx.AsyncClient, headers: dict[str, str], times: int = 10) -> None:
    for _ in range(times):
        assert_envelope(await client.post("/api/admin/session", headers={**WRONG, **headers}),
                        401, "unauthorized")


def _assert_locked(response: httpx.Response) -> None:
    assert_envelope(response, 429, "rate_limited")


async def _login(client: httpx.AsyncClient, headers: dict[str, str]) -> httpx.Response:
    return await client.post("/api/admin/session",
                             headers={"Authorization": f"Bearer {ADMIN_KEY}", **headers})


async def test_two_clients_behind_one_gateway_are_throttled_separately(
    embedded_redis_url: str, redis_client: aioredis.Redis
) -> None:
    """Catches the settings not reaching the throttle (`TRUSTED_PROXY_HEADER` read but
    `Services` still built with the default policy): every client behind the gateway shares its
    address, so one guesser locks the operator out too."""
    settings = _settings(embedded_redis_url, TRUSTED_PROXY_HEADER="X-MW-Client-IP",
                         TRUSTED_PROXIES="10.0.0.0/8")
    async with running_client(settings, client=GATEWAY) as gateway:
        await _guess(gateway, {HEADER: GUESSER})
        _assert_locked(await gateway.post("/api/admin/session",
                                          headers={**WRONG, HEADER: GUESSER}))
        assert (await _login(gateway, {HEADER: OPERATOR})).status_code == 200
        _assert_locked(await _login(gateway, {HEADER: GUESSER}))
    assert await redis_client.exists(keys.throttle_lock(GUESSER))
    assert not await redis_client.exists(keys.throttle_lock(GATEWAY[0]))


async def test_without_the_setting_the_header_is_ignored(
    embedded_redis_url: str, redis_client: aioredis.Redis
) -> None:
    """Catches a header believed by default: a guesser reaching the backend sends a new
    `x-mw-client-ip` with every try and is never locked."""
    async with running_client(_settings(embedded_redis_url), client=GATEWAY) as backend:
        for i in range(10):
            await _guess(backend, {HEADER: f"192.0.2.{i + 1}"}, times=1)
        _assert_locked(await _login(backend, {HEADER: OPERATOR}))
    assert await redis_client.exists(keys.throttle_lock(GATEWAY[0]))


async def test_with_trusted_proxies_the_header_from_another_peer_is_ignored(
    embedded_redis_url: str, redis_client: aioredis.Redis
) -> None:
    """Catches `TRUSTED_PROXIES` not restricting who may set the header: a client that reaches
    the backend around the gateway could choose its address and never be locked; the same
    header from the gateway's address is still believed."""
    settings = _settings(embedded_redis_url, TRUSTED_PROXY_HEADER=HEADER,
                         TRUSTED_PROXIES="10.20.30.40, 2001:db8::/32")
    async with running_client(settings, client=ELSEWHERE) as direct, \
            running_client(settings, client=GATEWAY) as gateway:
        for i in range(10):
            await _guess(direct, {HEADER: f"192.0.2.{i + 1}"}, times=1)
        _assert_locked(await _login(direct, {HEADER: OPERATOR}))
        assert (await _login(gateway, {HEADER: OPERATOR})).status_code == 200
    assert await redis_client.exists(keys.throttle_lock(ELSEWHERE[0]))


def test_a_malformed_setting_stops_the_start_with_its_name() -> None:
    """Catches a typo in `TRUSTED_PROXIES` read as "no restriction" (the header believed from
    any peer) instead of refusing to start."""
    with pytest.raises(ValueError, match="TRUSTED_PROXIES"):
        from_env({"TRUSTED_PROXY_HEADER": HEADER, "TRUSTED_PROXIES": "10.0.0.0/8;10.1.0.0/16"})


def test_a_dual_stack_peer_is_matched_as_its_ipv4_address() -> None:
    """Catches `TRUSTED_PROXIES=10.0.0.0/8` never matching a server bound to `::`, which sees
    an IPv4 gateway as `::ffff:10.x.y.z`: the header would be ignored and everyone counted as
    the gateway again."""
    policy = ClientAddressPolicy.parse(HEADER, "10.0.0.0/8")
    scope = {"type": "http", "method": "GET", "path": "/", "query_string": b"",
             "headers": [(HEADER.encode(), GUESSER.encode())],
             "client": ("::ffff:10.20.30.40", 1234)}
    assert client_of(Request(scope), policy) == GUESSER
