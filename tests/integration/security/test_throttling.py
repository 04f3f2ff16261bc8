"""Failed credentials lock the client address out, counted in a real Redis shared by every
instance (docs/security.md §4, reference §1.9)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import redis.asyncio as aioredis
from starlette.requests import Request

from messageweave.api.throttle import UNKNOWN_CLIENT, ClientAddressPolicy, client_of
from messageweave.store import keys
from tests.helpers import (
    ADMIN_KEY,
    WRONG_BEARER,
    admin_headers,
    assert_envelope,
    closed_port,
    login,
    running_client,
    sample_wire,
    save_wire,
    settings_for,
)

ATTACKER = ("203.0.113.5", 40000)
OPERATOR = ("198.51.100.7", 40001)
WIRE = sample_wire(telegram_api_base_url=f"http://127.0.0.1:{closed_port()}")

# (method, path, the right credential) for each route the issue names.
ROUTES = {
    "login": ("POST", "/api/admin/session", ADMIN_KEY),
    "bootstrap": ("POST", "/api/bootstrap", ADMIN_KEY),
    "worker": ("POST", "/worker", str(WIRE["worker_token"])),
    "reconcile": ("POST", "/reconcile", str(WIRE["reconcile_token"])),
    "metrics": ("GET", "/metrics", str(WIRE["worker_token"])),
}


@pytest.fixture
async def attacker(
    embedded_redis_url: str, redis_client: aioredis.Redis
) -> AsyncIterator[httpx.AsyncClient]:
    """The app, configured, seen from the attacker's address."""
    async with running_client(settings_for(embedded_redis_url), client=ATTACKER) as c:
        await _configure(c)
        yield c


async def _configure(client: httpx.AsyncClient) -> None:
    await save_wire(client, await login(client), WIRE)


async def _fail(client: httpx.AsyncClient, times: int, method: str = "POST",
                path: str = "/api/admin/session") -> None:
    for _ in range(times):
        assert_envelope(await client.request(method, path, headers=WRONG_BEARER), 401,
                        "unauthorized")


def _assert_locked(response: httpx.Response, lock_s: int) -> None:
    assert_envelope(response, 429, "rate_limited")
    assert lock_s - 1 <= int(response.headers["retry-after"]) <= lock_s


@pytest.mark.parametrize("name", list(ROUTES))
async def test_the_eleventh_wrong_credential_is_429_and_so_is_the_right_one(
    attacker: httpx.AsyncClient, name: str
) -> None:
    """Catches unthrottled guessing (300 wrong admin keys in 4 s were all answered 401), and a
    lock that still lets the right credential through (the guesser would learn it was right)."""
    method, path, token = ROUTES[name]
    await _fail(attacker, 10, method, path)
    _assert_locked(await attacker.request(method, path, headers=WRONG_BEARER), 60)
    right = {"Authorization": f"Bearer {token}"}
    _assert_locked(await attacker.request(method, path, headers=right), 60)


async def test_a_right_credential_from_another_address_still_works(
    attacker: httpx.AsyncClient, embedded_redis_url: str
) -> None:
    """Catches a global lock: one guesser must not lock the operator out."""
    await _fail(attacker, 10)
    async with running_client(settings_for(embedded_redis_url), client=OPERATOR) as operator:
        assert (await operator.post("/api/admin/session", headers=admin_headers())).is_success
        worker = {"Authorization": f"Bearer {WIRE['worker_token']}"}
        assert (await operator.get("/metrics", headers=worker)).status_code == 200
    _assert_locked(await attacker.post("/api/admin/session", headers=admin_headers()), 60)


async def test_each_further_lock_doubles(
    attacker: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    """Catches a lock that does not grow: a patient guesser would get 10 tries a minute
    forever instead of fewer and fewer."""
    client = ATTACKER[0]
    for lock_s in (60, 120, 240):
        await _fail(attacker, 10)
        _assert_locked(await attacker.post("/api/admin/session", headers=WRONG_BEARER), lock_s)
        assert await redis_client.get(keys.throttle_lock(client)) == str(lock_s)
        await redis_client.delete(keys.throttle_lock(client))  # what its EX does in lock_s
    assert await redis_client.get(keys.throttle_strikes(client)) == "3"


async def test_the_lock_stops_growing_at_an_hour(
    attacker: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    """Catches an unbounded doubling (a lock of days for an operator who mistyped a key)."""
    await redis_client.set(keys.throttle_strikes(ATTACKER[0]), 20)
    await _fail(attacker, 10)
    _assert_locked(await attacker.post("/api/admin/session", headers=WRONG_BEARER), 3600)


async def test_two_instances_on_one_redis_share_the_count(
    embedded_redis_url: str, redis_client: aioredis.Redis
) -> None:
    """Catches a per-process counter: behind the gateway each instance would allow its own 10
    tries, and rotating over instances would multiply them."""
    settings = settings_for(embedded_redis_url)
    async with running_client(settings, client=ATTACKER) as a, \
            running_client(settings, client=ATTACKER) as b:
        await _fail(a, 5)
        await _fail(b, 5)
        _assert_locked(await a.post("/api/admin/session", headers=WRONG_BEARER), 60)
        _assert_locked(await b.post("/api/admin/session", headers=WRONG_BEARER), 60)


async def test_failures_on_every_bearer_route_add_up(attacker: httpx.AsyncClient) -> None:
    """Catches an oracle left open: a settings route answers 403 to a right worker token and
    401 to a wrong one, so it must count guesses like `/worker` does, in the same count."""
    await _fail(attacker, 4, "GET", "/api/business-config")
    await _fail(attacker, 3, "GET", "/api/enabled")
    await _fail(attacker, 3, "POST", "/worker")
    _assert_locked(await attacker.get("/api/business-config", headers=WRONG_BEARER), 60)


async def test_the_lock_is_audited(attacker: httpx.AsyncClient, embedded_redis_url: str) -> None:
    """Catches a lock nobody hears about: the operator must find who was locked, for how long
    and on which route in the audit log."""
    await _fail(attacker, 10, "POST", "/reconcile")
    async with running_client(settings_for(embedded_redis_url), client=OPERATOR) as operator:
        session = (await operator.post("/api/admin/session", headers=admin_headers())).json()
        records = (await operator.get("/api/logs/audit", headers={
            "Authorization": f"Bearer {session['session']}"})).json()["records"]
    [locked] = [r for r in records if r["action"] == "auth_throttled"]
    assert (locked["client"], locked["lock_s"], locked["method"], locked["path"]) == (
        ATTACKER[0], 60, "POST", "/reconcile")
    assert ADMIN_KEY not in str(records) and "not-the-token" not in str(records)


async def test_every_throttle_key_expires_and_no_credential_counts_nothing(
    attacker: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    """Catches unauthenticated requests filling Redis (a key without a TTL per address would
    grow forever), and counting requests that guessed nothing."""
    for _ in range(30):
        assert_envelope(await attacker.post("/api/admin/session"), 401, "unauthorized")
    assert await redis_client.keys("{thr}:throttle:*") == []
    await _fail(attacker, 10)
    names = await redis_client.keys("{thr}:throttle:*")
    assert sorted(names) == sorted([keys.throttle_lock(ATTACKER[0]),
                                    keys.throttle_strikes(ATTACKER[0]),
                                    keys.THROTTLE_CLIENTS])  # the index (issue #23)
    await redis_client.delete(keys.throttle_lock(ATTACKER[0]))
    await _fail(attacker, 1)
    for name in await redis_client.keys("{thr}:throttle:*"):
        assert 0 < await redis_client.ttl(name) <= keys.THROTTLE_STRIKES_TTL_S, name
    assert 0 < await redis_client.ttl(keys.throttle_failures(ATTACKER[0])) <= 60


async def test_a_client_header_does_not_move_the_count_unless_trusted(
    attacker: httpx.AsyncClient,
) -> None:
    """Catches a throttle that believes `X-Forwarded-For` by default: a guesser would send a
    new address with every try and never be locked."""
    for i in range(10):
        spoofed = {**WRONG_BEARER, "X-Forwarded-For": f"192.0.2.{i}", "X-Real-IP": f"192.0.2.{i}",
                   "CF-Connecting-IP": f"192.0.2.{i}"}
        assert_envelope(await attacker.post("/api/admin/session", headers=spoofed), 401,
                        "unauthorized")
    _assert_locked(await attacker.post("/api/admin/session", headers={
        **WRONG_BEARER, "X-Forwarded-For": "192.0.2.99"}), 60)


# ------------------------------------------------------------ where the client address comes from


def _request(peer: str | None, headers: dict[str, str] | None = None) -> Request:
    scope = {"type": "http", "method": "GET", "path": "/", "query_string": b"",
             "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
             "client": None if peer is None else (peer, 1234)}
    return Request(scope)


def test_the_socket_peer_is_the_client_by_default() -> None:
    """Catches a default that trusts a header anyone can send."""
    default = ClientAddressPolicy()
    assert client_of(_request("203.0.113.5", {"x-forwarded-for": "192.0.2.1"}), default) == \
        "203.0.113.5"
    assert client_of(_request(None), default) == UNKNOWN_CLIENT


def test_a_named_header_is_believed_only_from_the_named_proxies() -> None:
    """Catches a trusted header believed from any peer when proxies are listed, and a list
    header read from its left (the part the client wrote) instead of its right."""
    policy = ClientAddressPolicy.parse("X-MW-Client-IP", "10.0.0.0/8, 2001:db8:1::/48")
    header = {"x-mw-client-ip": "192.0.2.1, 198.51.100.20"}
    assert client_of(_request("10.1.2.3", header), policy) == "198.51.100.20"
    assert client_of(_request("2001:db8:1::5", header), policy) == "198.51.100.20"
    assert client_of(_request("203.0.113.5", header), policy) == "203.0.113.5"
    assert client_of(_request("10.1.2.3"), policy) == "10.1.2.3"  # header absent: the peer
    any_peer = ClientAddressPolicy.parse("x-mw-client-ip", "")
    assert client_of(_request("203.0.113.5", header), any_peer) == "198.51.100.20"


def test_addresses_are_normalised_so_a_header_cannot_name_a_key() -> None:
    """Catches per-address counting an IPv6 subscriber escapes by moving inside its /64, and a
    header value that becomes a Redis key verbatim."""
    policy = ClientAddressPolicy.parse("x-mw-client-ip", "")
    assert client_of(_request("2001:db8:5:6:aaaa::1"), policy) == "2001:db8:5:6::/64"
    assert client_of(_request("::ffff:203.0.113.5"), policy) == "203.0.113.5"
    assert client_of(_request("10.0.0.1", {"x-mw-client-ip": "x\r\n*"}), policy) == \
        UNKNOWN_CLIENT
