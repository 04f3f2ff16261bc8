"""Issue #12, item 5: bad input is a 400 or a 422, never a 500.

Every route reads JSON through `messageweave.jsonio.parse_json`, which refuses anything nested
deeper than `MAX_JSON_DEPTH` (64) before the recursive decoder sees it; the configuration rules
bound every string, list and chat id (reference §5.2). The real app with real Redis.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.jsonio import MAX_JSON_DEPTH
from messageweave.store import keys
from tests.helpers import admin_headers, assert_envelope, configured_and_enabled, login, sample_wire
from tests.integration.mailbox.push_server import record_test_registration

WEBHOOK_SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"


def nested(depth: int) -> str:
    """An object nesting `depth` levels: `{"a":{"a":…{}…}}`."""
    return '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)


def deep_arrays(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


async def state_of(r: aioredis.Redis) -> dict[str, Any]:
    """Everything a request could have written: every key, the streams' lengths, the config."""
    names = sorted(await r.keys("*"))
    return {
        "keys": names,
        "streams": [await r.xlen(s) for s in keys.STREAMS if s in names],
        "config": (await r.get(keys.BUSINESS_CONFIG), await r.get(keys.BUSINESS_CONFIG_REVISION)),
    }


async def route_headers(client: httpx.AsyncClient,
                        redis: aioredis.Redis) -> dict[str, dict[str, str]]:
    session = await configured_and_enabled(client)
    push = await record_test_registration(redis)  # /push/jmap takes the callback token first
    return {
        push: {"Content-Type": "application/json"},
        "/webhook/tg": {WEBHOOK_SECRET_HEADER: str(sample_wire()["telegram_webhook_secret"])},
        "/api/bootstrap": admin_headers(),
        "/api/business-config/preflight": session,
        "/api/business-config": session,
    }


def method_of(path: str) -> str:
    return "PUT" if path == "/api/business-config" else "POST"


def server_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("body", [
    pytest.param(deep_arrays(5000), id="5000-deep-arrays"),
    pytest.param(nested(5000).encode(), id="5000-deep-objects"),
    pytest.param(nested(MAX_JSON_DEPTH + 1).encode(), id="65-deep"),
])
async def test_deep_json_is_a_400_on_every_route_and_writes_nothing(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, caplog: pytest.LogCaptureFixture,
    body: bytes,
) -> None:
    """Bug: 5,000-deep JSON (10 KB, no credentials needed on /push/jmap) blew the decoder's
    recursion limit: 500 internal_error and an ERROR log line on every JSON route."""
    headers = await route_headers(client, redis_client)
    before = await state_of(redis_client)
    caplog.set_level(logging.DEBUG)
    for path, auth in headers.items():
        response = await client.request(method_of(path), path, content=body, headers=auth)
        assert_envelope(response, 400, "invalid_request")
    assert server_errors(caplog) == []
    assert await state_of(redis_client) == before


async def test_json_nested_exactly_64_deep_still_parses(
    client: httpx.AsyncClient, redis_client: aioredis.Redis,
) -> None:
    """Bug: an off-by-one depth limit would refuse a legitimate Telegram update that carries
    nested extra fields (the webhook keeps only what it needs, and ignores the rest)."""
    headers = await route_headers(client, redis_client)
    update = '{"update_id": 4242, "extra": ' + nested(MAX_JSON_DEPTH - 1) + "}"
    response = await client.post("/webhook/tg", content=update, headers=headers["/webhook/tg"])
    assert response.status_code == 204, response.text
    assert await redis_client.exists(keys.dedup_tg(4242))
    # A configuration route reads it too; then the unknown field is what is refused.
    response = await client.put("/api/business-config", content=nested(MAX_JSON_DEPTH),
                                headers=headers["/api/business-config"])
    assert_envelope(response, 422, "invalid_configuration")


async def test_deep_json_in_a_preflight_is_a_400_while_other_bad_json_stays_a_report(
    client: httpx.AsyncClient,
) -> None:
    """Bug: preflight parsed its body itself, outside the one reader, so the depth limit
    could be bypassed there; its documented 200 report for non-JSON must not change."""
    session = await login(client)
    path = "/api/business-config/preflight"
    assert_envelope(await client.post(path, content=deep_arrays(100), headers=session),
                    400, "invalid_request")
    report = await client.post(path, content=b"{not json", headers=session)
    assert report.status_code == 200
    assert report.json()["validation"]["errors"] == ["请求体不是有效的 JSON"]


@pytest.mark.parametrize("body", [
    pytest.param(b'{"jmap_username": "\\ud800"}', id="lone-surrogate"),
    pytest.param(b'{"reconcile_interval_s": NaN}', id="NaN"),
    pytest.param(b'{"reconcile_interval_s": Infinity}', id="Infinity"),
    pytest.param(b'{"telegram_chat_id": 1' + b"0" * 5000 + b"}", id="5000-digit-number"),
    pytest.param(b"\xff\xfe\x00", id="not-text"),
])
async def test_json_that_cannot_be_stored_is_a_400(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, caplog: pytest.LogCaptureFixture,
    body: bytes,
) -> None:
    """Bug: a lone UTF-16 surrogate (`\\ud800`) decoded fine and then failed to encode when the
    configuration was encrypted: a 500. NaN/Infinity are not JSON and were accepted."""
    session = await login(client)
    before = await state_of(redis_client)
    caplog.set_level(logging.DEBUG)
    response = await client.put("/api/business-config", content=body, headers=session)
    assert_envelope(response, 400, "invalid_request")
    assert server_errors(caplog) == []
    assert await state_of(redis_client) == before


@pytest.mark.parametrize(("overrides", "message"), [
    ({"telegram_chat_id": 10**39}, "TELEGRAM_CHAT_ID must be a signed 64-bit chat id"),
    ({"chat_allowlist": [1, 10**39]}, "CHAT_ALLOWLIST must list signed 64-bit chat ids"),
    ({"chat_allowlist": list(range(1, 102))}, "CHAT_ALLOWLIST must list at most 100 chat ids"),
    ({"llm_model": "m" * 1_000_000}, "LLM_MODEL must be at most 200 characters"),
    ({"llm_model": "m" * 201}, "LLM_MODEL must be at most 200 characters"),
    ({"jmap_username": "u" * 321}, "JMAP_USERNAME must be at most 320 characters"),
    ({"account_id": "a" * 257}, "ACCOUNT_ID must be at most 256 characters"),
    ({"bot_token": "1:" + "b" * 255}, "BOT_TOKEN must be at most 256 characters"),
    ({"telegram_api_base_url": "https://api.example.com/" + "p" * 2048},
     "TELEGRAM_API_BASE_URL must be at most 2048 characters"),
    ({"notify_mailbox_roles": ["inbox", "r" * 65]},
     "NOTIFY_MAILBOX_ROLES must list at most 16 roles of at most 64 characters"),
])
async def test_out_of_bounds_fields_are_refused_by_name(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, overrides: dict[str, Any],
    message: str,
) -> None:
    """Bug: the configuration accepted a chat id of 10^39 (Telegram ids are 64-bit) and a
    1 MB model name, stored them, and only failed later, far from the cause."""
    session = await login(client)
    before = await state_of(redis_client)
    for method, path, headers in (("PUT", "/api/business-config", session),
                                  ("POST", "/api/bootstrap", admin_headers())):
        response = await client.request(method, path, json=sample_wire(**overrides),
                                        headers=headers)
        assert_envelope(response, 422, "invalid_configuration")
        assert response.headers["x-config-error"] == message
    assert await state_of(redis_client) == before
    report = await client.post("/api/business-config/preflight", json=sample_wire(**overrides),
                               headers=session)
    assert report.json()["validation"]["errors"] == [message]


async def test_a_numeric_string_chat_id_in_a_patch_is_bounded_too(
    client: httpx.AsyncClient,
) -> None:
    """Bug: the patch form of `telegram_chat_id` (a numeric string) skipped the range check."""
    session = await configured_and_enabled(client)
    response = await client.put("/api/business-config", json={"telegram_chat_id": "9" * 30},
                                headers=session)
    assert_envelope(response, 422, "invalid_configuration")
    assert response.headers["x-config-error"] == \
        "TELEGRAM_CHAT_ID must be a signed 64-bit chat id"
