"""Issue #23, finding 3 ("the gateway can be bypassed") and the backend's half of finding 8
(HSTS): with `GATEWAY_SECRET` set, a backend serves only requests the gateway signed
(`x-mw-gateway-signature`, reference §3.3, §3.4) and believes `x-mw-client-ip` only on them.

The real app and a real Redis; the signature is computed here with `hmac` from the documented
format, not with the code under test, so a change of the wire format fails here."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis
import uvicorn
from starlette.requests import Request

from messageweave.app import create_app
from messageweave.settings import Settings, from_env
from messageweave.store import keys
from tests.helpers import (
    ADMIN_KEY,
    assert_envelope,
    fastapi_of,
    free_port,
    run_cli,
    running_client,
    sample_wire,
    serving,
)

SECRET = "messageweave-gateway-test-secret-0123456789"
CODE = "gateway_signature_invalid"
HEADER = "x-mw-gateway-signature"
CLIENT_IP = "x-mw-client-ip"
DEBUG_TOKEN = "debug-token-for-the-signature-test"
HSTS = "max-age=31536000; includeSubDomains"
GATEWAY = ("10.20.30.40", 40000)  # the peer the gateway's requests arrive from
GUESSER = "198.51.100.7"
OPERATOR = "192.0.2.44"
WRONG = {"Authorization": "Bearer not-the-token"}


def signed(method: str, target: str, client_ip: str = "", *, t: int | None = None,
           secret: str = SECRET) -> dict[str, str]:
    """The headers the gateway adds: HMAC-SHA256 over "t\\nMETHOD\\npath?query\\nclient-ip"."""
    t = int(time.time()) if t is None else t
    text = f"{t}\n{method}\n{target}\n{client_ip}".encode()
    mac = hmac.new(secret.encode(), text, hashlib.sha256).hexdigest()
    headers = {HEADER: f"t={t},v1={mac}"}
    if client_ip:
        headers[CLIENT_IP] = client_ip
    return headers


def _settings(redis_url: str, **env: str) -> Settings:
    """Through `from_env`, as `messageweave serve` reads them."""
    return from_env({"REDIS_URL": redis_url, "CONFIG_ENCRYPTION_KEY": ADMIN_KEY,
                     "GATEWAY_SECRET": SECRET, "DEBUG_ENABLED": "1", "DEBUG_TOKEN": DEBUG_TOKEN,
                     **env})


ROUTES = [("GET", "/api/status"), ("GET", "/ready"), ("GET", "/"), ("GET", "/assets/main.js"),
          ("GET", "/openapi.json"), ("POST", "/api/bootstrap"), ("POST", "/api/admin/session"),
          ("GET", "/metrics"), ("GET", "/debug/ping"), ("POST", "/webhook/tg"),
          ("POST", "/push/jmap"), ("GET", "/no/such/path"), ("DELETE", "/api/config")]


async def test_without_the_signature_every_route_but_healthz_is_refused(
    embedded_redis_url: str, redis_client: aioredis.Redis
) -> None:
    """Finding 3: catches a backend that serves a caller who skipped the gateway:
    `/api/bootstrap`, `/debug/*` and `/metrics` (which the gateway never forwards) and every
    other route, unknown paths included (a 404 would tell which routes exist). Only the
    platform's liveness probe `/healthz` stays open."""
    async with running_client(_settings(embedded_redis_url)) as direct:
        for method, path in ROUTES:
            headers = {"Authorization": f"Bearer {DEBUG_TOKEN if 'debug' in path else ADMIN_KEY}"}
            response = await direct.request(method, path, headers=headers, content=b"{}")
            assert_envelope(response, 403, CODE)
            assert response.headers["cache-control"] == "no-store"
        health = await direct.get("/healthz")
        assert (health.status_code, health.text) == (200, "ok")
        # the gateway's probe of /healthz is unsigned; a signed one is fine too
        assert (await direct.get("/healthz", headers=signed("GET", "/healthz"))).status_code == 200


async def test_setup_mode_refuses_unsigned_requests_too(embedded_redis_url: str) -> None:
    """Finding 3: catches the check living only in configured mode: a backend waiting for its
    key would still show its status page to anyone around the gateway."""
    settings = from_env({"REDIS_URL": embedded_redis_url, "GATEWAY_SECRET": SECRET})
    assert not settings.configured
    async with running_client(settings) as direct:
        assert_envelope(await direct.get("/api/status"), 403, CODE)
        assert (await direct.get("/api/status", headers=signed("GET", "/api/status"))
                ).json()["mode"] == "configuration-setup"
        assert (await direct.get("/healthz")).status_code == 200


async def test_a_signature_must_match_what_was_sent_and_be_fresh(
    embedded_redis_url: str, redis_client: aioredis.Redis
) -> None:
    """Finding 3: catches a signature that is only looked at, not checked: another key, a
    replay after the 60 s window, one made for another method, path, query or client address,
    or a malformed header must all be refused; within the window it is served. Each header is
    made just before its request, its time relative to then, with a second to spare on each
    side of the window (the check counts whole seconds): the times were once taken before the
    app started, and a start of more than a second made "61 s ahead" only 60 ahead (served)."""
    target = "/api/status?x=1"

    def at(offset_s: int) -> Callable[[], dict[str, str]]:
        return lambda: signed("GET", target, t=int(time.time()) + offset_s)

    bad: dict[str, Callable[[], dict[str, str]]] = {
        "another secret": lambda: signed("GET", target,
                                         secret="another-secret-of-32-characters-xx"),
        "62 s old": at(-62),
        "62 s ahead": at(62),
        "another method": lambda: signed("POST", target),
        "another path": lambda: signed("GET", "/api/enabled?x=1"),
        "another query": lambda: signed("GET", "/api/status?x=2"),
        "no query signed": lambda: signed("GET", "/api/status"),
        "uppercase hex": lambda: {HEADER: signed("GET", target)[HEADER].replace(",v1=", ",V1=")
                                  .upper().replace(",V1=", ",v1=").replace("T=", "t=")},
        "no v1": lambda: {HEADER: f"t={int(time.time())}"},
        "empty": lambda: {HEADER: ""},
        "two signatures": lambda: {HEADER: f"{signed('GET', target)[HEADER]},"
                                           f"{signed('GET', target)[HEADER]}"},
    }
    async with running_client(_settings(embedded_redis_url), client=GATEWAY) as backend:
        for why, headers in bad.items():
            response = await backend.get(target, headers=headers())
            assert response.status_code == 403, why
            assert_envelope(response, 403, CODE)
        tampered = {**signed("GET", target, GUESSER), CLIENT_IP: OPERATOR}
        assert_envelope(await backend.get(target, headers=tampered), 403, CODE)
        for offset in (-58, 0, 58):
            response = await backend.get(target, headers=at(offset)())
            assert response.status_code == 200, (offset, response.text)
        # A signed request reaches the route's own checks.
        assert_envelope(await backend.post("/api/bootstrap", headers={
            **WRONG, **signed("POST", "/api/bootstrap")}, json=sample_wire()), 401,
            "unauthorized")
        ping = await backend.get("/debug/ping", headers={
            "Authorization": f"Bearer {DEBUG_TOKEN}", **signed("GET", "/debug/ping")})
        assert ping.json() == {"ok": True}


async def _guess(backend: httpx.AsyncClient, client_ip: str, *, sign: bool) -> httpx.Response:
    headers = {**WRONG, **(signed("POST", "/api/admin/session", client_ip) if sign
                           else {CLIENT_IP: client_ip})}
    return await backend.post("/api/admin/session", headers=headers)


async def test_a_direct_caller_cannot_choose_its_throttle_bucket(
    embedded_redis_url: str, redis_client: aioredis.Redis
) -> None:
    """Finding 3: catches `TRUSTED_PROXY_HEADER` believed from a caller that skipped the
    gateway: with a new `x-mw-client-ip` per try it was never locked (and `TRUSTED_PROXIES`
    cannot name Cloudflare's shared egress). With the secret such a request is refused before
    any credential is looked at, and a signed one is counted against the address it carries."""
    settings = _settings(embedded_redis_url, TRUSTED_PROXY_HEADER=CLIENT_IP)
    async with running_client(settings, client=GATEWAY) as backend:
        for i in range(12):
            assert_envelope(await _guess(backend, f"192.0.2.{i + 1}", sign=False), 403, CODE)
        assert await redis_client.keys("{thr}:throttle:*") == []
        for _ in range(10):
            assert_envelope(await _guess(backend, GUESSER, sign=True), 401, "unauthorized")
        assert_envelope(await _guess(backend, GUESSER, sign=True), 429, "rate_limited")
        login = await backend.post("/api/admin/session", headers={
            "Authorization": f"Bearer {ADMIN_KEY}",
            **signed("POST", "/api/admin/session", OPERATOR)})
        assert login.status_code == 200, login.text
    assert await redis_client.exists(keys.throttle_lock(GUESSER))
    assert not await redis_client.exists(keys.throttle_lock(GATEWAY[0]))


def test_the_client_address_header_is_believed_only_on_a_signed_request(
    embedded_redis_url: str,
) -> None:
    """Finding 3: catches `Services.client_address` believing the header on a request the
    signature check let through unsigned (`/healthz`, or a route added to the open list
    later): the header is the gateway's only when the gateway signed the request."""
    from messageweave.api import credentials

    app = fastapi_of(create_app(_settings(embedded_redis_url, TRUSTED_PROXY_HEADER=CLIENT_IP)))

    def request(**extra: object) -> Request:
        return Request({"type": "http", "method": "POST", "path": "/api/admin/session",
                        "query_string": b"", "headers": [(CLIENT_IP.encode(), GUESSER.encode())],
                        "client": GATEWAY, "app": app, **extra})

    assert credentials.client_address(request()).header is None
    assert credentials.client_address(request(**{"messageweave.gateway_signed": True})).header \
        == CLIENT_IP


@pytest.mark.parametrize("value", ["short", "x" * 31, " " + "x" * 40, "x" * 40 + "\n",
                                   "é" * 40, "x" * 1025, "x" * 20 + " " + "x" * 20])
def test_a_weak_or_malformed_secret_stops_the_start_with_its_name(value: str) -> None:
    """Finding 3: catches a placeholder or mistyped secret accepted (a guessable key signs
    anything) or silently ignored (the backend open again); the value is never printed."""
    with pytest.raises(ValueError, match="GATEWAY_SECRET") as raised:
        from_env({"GATEWAY_SECRET": value})
    assert value.strip() not in str(raised.value)


def test_a_blank_secret_is_unset_and_never_shown() -> None:
    assert from_env({"GATEWAY_SECRET": "  "}).gateway_secret == ""
    s = from_env({"GATEWAY_SECRET": SECRET})
    assert s.gateway_secret == SECRET and SECRET not in repr(s)


def test_the_known_answer_vector_both_sides_agree_on() -> None:
    """Catches the backend and the Worker disagreeing on the signed text: the same vector is
    in gateway/test/signature.test.js."""
    from messageweave.api.gateway import sign

    expected = "t=1700000000,v1=f5c4ad886fb153bf9b8682b2461a500fe6dec1327b109b4a6f23ab9f7d8fd067"
    assert sign(SECRET, 1700000000, "POST", "/api/trace?q=a%20b", "203.0.113.7") == expected
    assert signed("POST", "/api/trace?q=a%20b", "203.0.113.7", t=1700000000)[HEADER] == expected


async def test_behind_the_gateway_every_answer_carries_hsts(
    embedded_redis_url: str, redis_client: aioredis.Redis
) -> None:
    """Finding 8 (the backend's half): catches a backend deployed behind the gateway (so
    served over https) whose answers, its refusals included, carry no HSTS; without the
    secret a plain-http backend sends none (RFC 6797 §7.2)."""
    async with running_client(_settings(embedded_redis_url)) as backend:
        for response in (await backend.get("/api/status"), await backend.get("/healthz"),
                         await backend.get("/api/status", headers=signed("GET", "/api/status"))):
            assert response.headers.get_list("strict-transport-security") == [HSTS]
    plain = from_env({"REDIS_URL": embedded_redis_url, "CONFIG_ENCRYPTION_KEY": ADMIN_KEY})
    async with running_client(plain) as backend:
        assert "strict-transport-security" not in (await backend.get("/api/status")).headers


async def test_the_bootstrap_command_signs_with_the_secret_of_its_environment(
    embedded_redis_url: str, redis_client: aioredis.Redis, tmp_path: Path,
) -> None:
    """Finding 3: with the secret set `/api/bootstrap` is refused unsigned, so the operator's
    `messageweave bootstrap` (run beside the backend, with its environment) must sign, or a
    new deployment could never be configured."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(sample_wire()))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(
        create_app(_settings(embedded_redis_url)), host="127.0.0.1", port=port,
        log_config=None, access_log=False, lifespan="on", timeout_graceful_shutdown=3))
    url = f"http://127.0.0.1:{port}"
    async with serving(server):
        code, out = await run_cli("bootstrap", "--file", str(config), "--url", url,
                                  CONFIG_ENCRYPTION_KEY=ADMIN_KEY)
        assert code != 0 and CODE in out, out
        assert not await redis_client.exists(keys.BUSINESS_CONFIG)
        code, out = await run_cli("bootstrap", "--file", str(config), "--url", url,
                                  CONFIG_ENCRYPTION_KEY=ADMIN_KEY, GATEWAY_SECRET=SECRET)
        assert code == 0, out
    assert await redis_client.exists(keys.BUSINESS_CONFIG)
