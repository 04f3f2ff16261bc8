"""`/api/business-config`, preflight and bootstrap against a real Redis."""

import json
import secrets

import httpx
import redis.asyncio as aioredis

from messageweave.config.model import parse_wire
from messageweave.probes import telegram_get_me_failure
from messageweave.store import keys
from tests.helpers import (
    admin_headers,
    assert_envelope,
    closed_port,
    first_save,
    login,
    sample_wire,
    snapshot,
    stored_wire,
)
from tests.peers.telegram import TelegramEmulator

SECRET_VALUES = ("123456:bot-token-SECRET", "webhook-secret-SECRET", "jmap-password-SECRET",
                 "reconcile-SECRET", "worker-token-SECRET")


async def test_nothing_saved_reads_as_unconfigured(client: httpx.AsyncClient) -> None:
    response = await client.get("/api/business-config", headers=await login(client))
    assert response.status_code == 200
    body = response.json()
    assert body["configured"] is False and body["revision"] == 0
    assert body["values"]["timezone"] == "Asia/Shanghai"
    assert body["values"]["chat_allowlist"] == [] and body["values"]["telegram_chat_id"] is None
    assert not any(body["secrets_present"].values()) and len(body["secrets_present"]) == 8


async def test_first_save_persists_encrypted_and_reports_runtime_failure(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    response = await first_save(client)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["persisted"] is True and body["revision"] == 1
    assert response.headers["x-business-config-revision"] == "1"
    # The JMAP server is a closed port: saved anyway, the failure is reported, not hidden.
    assert body["runtime_applied"] is False
    assert body["warnings"][0]["component"] == "jmap"
    assert body["warnings"][0]["step"] == "connect"
    for secret in SECRET_VALUES:
        assert secret not in response.text
    raw = await redis_client.get(keys.BUSINESS_CONFIG)
    assert raw.startswith("v1:") and all(s not in raw for s in SECRET_VALUES)
    wire = await stored_wire(redis_client)
    assert wire["bot_token"] == "123456:bot-token-SECRET"
    assert wire["notify_mailbox_roles"] == ["inbox"] and wire["delivery_policy"] == "at_least_once"


async def test_readback_shows_values_and_presence_never_secrets(client: httpx.AsyncClient) -> None:
    await first_save(client, llm_api_key="sk-SECRET-llm", imap_password="imap-SECRET",
                     smtp_password="smtp-SECRET")
    response = await client.get("/api/business-config", headers=await login(client))
    body = response.json()
    assert body["configured"] is True and body["revision"] == 1
    assert body["values"]["jmap_username"] == "alice"
    assert body["values"]["telegram_chat_id"] == 4242
    assert body["values"]["reconcile_interval_s"] == 60
    assert all(body["secrets_present"].values())
    for secret in (*SECRET_VALUES, "sk-SECRET-llm", "imap-SECRET", "smtp-SECRET"):
        assert secret not in response.text


async def test_partial_patch_merges_onto_the_stored_wire(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    await first_save(client)
    headers = await login(client)
    response = await client.put("/api/business-config", headers=headers,
                                json={"jmap_username": "bob", "revision": 1,
                                      "telegram_chat_id": "99", "timezone": "Europe/Berlin"})
    assert response.status_code == 200, response.text
    assert response.json()["revision"] == 2
    wire = await stored_wire(redis_client)
    assert wire["jmap_username"] == "bob" and wire["telegram_chat_id"] == 99
    assert wire["timezone"] == "Europe/Berlin"
    assert wire["jmap_password"] == "jmap-password-SECRET"  # untouched secret kept


async def test_stale_revision_is_409_and_writes_nothing(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    await first_save(client)
    before = await snapshot(redis_client)
    response = await client.put("/api/business-config", headers=await login(client),
                                json={"jmap_username": "bob", "revision": 7})
    assert_envelope(response, 409, "conflict")
    assert "retry-after" not in response.headers
    assert await snapshot(redis_client) == before


async def test_bad_input_changes_nothing(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    await first_save(client)
    headers = await login(client)
    before = await snapshot(redis_client)
    cases = [
        (b"not json", 400, "invalid_request"),
        (json.dumps({"unknown": 1}).encode(), 422, "invalid_configuration"),
        (json.dumps({"jmap_username": 5}).encode(), 422, "invalid_configuration"),
        (json.dumps({"timezone": "Mars/Base"}).encode(), 422, "invalid_configuration"),
        (json.dumps({"jmap_session_url": "http://mail.example.com/"}).encode(), 422,
         "invalid_configuration"),
        (json.dumps({"chat_allowlist": []}).encode(), 422, "invalid_configuration"),
        (json.dumps([1, 2]).encode(), 422, "invalid_configuration"),
    ]
    for body, status, code in cases:
        response = await client.put("/api/business-config", content=body, headers=headers)
        assert_envelope(response, status, code)
        assert await snapshot(redis_client) == before, body


async def test_rejected_configuration_names_the_rule_in_a_header(
    client: httpx.AsyncClient,
) -> None:
    await first_save(client)
    response = await client.put("/api/business-config", headers=await login(client),
                                json={"jmap_session_url": "http://mail.example.com/"})
    assert response.headers["x-config-error"] == \
        "JMAP_SESSION_URL must be HTTPS without credentials or query"


async def test_incomplete_first_save_is_422_and_stores_nothing(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    response = await client.put("/api/business-config", headers=await login(client),
                                json={"jmap_username": "bob"})
    assert_envelope(response, 422, "invalid_configuration")
    assert await snapshot(redis_client) == (None, None)


async def test_config_routes_need_a_session(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "bearer x"}):
        response = await client.get("/api/business-config", headers=headers)
        assert_envelope(response, 401, "unauthorized")
    response = await client.get("/api/business-config", headers=admin_headers())
    assert_envelope(response, 403, "forbidden")
    response = await client.put("/api/business-config", json=sample_wire())
    assert_envelope(response, 401, "unauthorized")
    assert await snapshot(redis_client) == (None, None)
    await first_save(client)
    worker = {"Authorization": "Bearer worker-token-SECRET"}
    assert_envelope(await client.get("/api/business-config", headers=worker), 403, "forbidden")


async def test_undecryptable_stored_value_is_503(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    headers = await login(client)
    await redis_client.set(keys.BUSINESS_CONFIG, "v1:00:00")
    response = await client.get("/api/business-config", headers=headers)
    assert_envelope(response, 503, "service_unavailable")
    assert response.headers["retry-after"] == "30"


async def test_preflight_validates_and_probes_without_writing(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    headers = await login(client)
    ok = await client.post("/api/business-config/preflight", json=sample_wire(), headers=headers)
    assert ok.status_code == 200
    body = ok.json()
    assert body["persisted"] is False and body["validation"] == {"ok": True, "errors": []}
    assert body["components"]["jmap"]["ok"] is False
    assert body["components"]["jmap"]["errors"][0]["component"] == "jmap"
    assert body["components"]["llm"] is None
    bad = await client.post("/api/business-config/preflight", headers=headers,
                            json=sample_wire(chat_allowlist=[]))
    assert bad.json() == {"persisted": False, "components": None, "validation": {
        "ok": False, "errors": ["CHAT_ALLOWLIST must contain at least one chat id"]}}
    garbage = await client.post("/api/business-config/preflight", content=b"{", headers=headers)
    assert garbage.json()["validation"]["errors"] == ["请求体不是有效的 JSON"]
    partial = await client.post("/api/business-config/preflight", json={"bot_token": "x"},
                                headers=headers)
    assert partial.json()["validation"]["errors"] == ["JSON 不是有效的业务配置对象"]
    assert await snapshot(redis_client) == (None, None)


async def test_preflight_tests_telegram_too_and_says_why_it_failed(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, telegram_emulator: TelegramEmulator,
) -> None:
    """Catches "Test connection" passing with a wrong bot token (issue #22): it probed the mail
    server only, so the first sign of a typo was a bot that never answered. getMe goes to the
    configured Bot API address, and a refusal says it was the token."""
    headers = await login(client)
    token = f"{secrets.randbelow(10**9)}:{secrets.token_urlsafe(20)}"
    wire = sample_wire(bot_token=token, telegram_api_base_url=telegram_emulator.base_url)
    ok = await client.post("/api/business-config/preflight", json=wire, headers=headers)
    assert ok.json()["components"]["telegram"] == {"ok": True}
    await telegram_emulator.reject_token(token)
    refused = await client.post("/api/business-config/preflight", json=wire, headers=headers)
    assert refused.json()["components"]["telegram"] == {"ok": False, "errors": [{
        "component": "telegram", "step": "get_me",
        "detail": "Telegram refused the bot token (HTTP 401): Unauthorized"}]}
    assert token not in refused.text
    await telegram_emulator.clear_failures(token)
    gone = await client.post("/api/business-config/preflight", headers=headers, json=sample_wire(
        telegram_api_base_url=f"http://127.0.0.1:{closed_port()}"))
    [error] = gone.json()["components"]["telegram"]["errors"]
    assert error["detail"].startswith("the Bot API could not be reached"), error
    assert await snapshot(redis_client) == (None, None)


async def test_preflight_reports_llm_when_enabled(client: httpx.AsyncClient) -> None:
    wire = sample_wire(llm_enabled=True, llm_allow_net=True, llm_api_key="k",
                       llm_model="m", llm_base_url="http://127.0.0.1:9/v1")
    response = await client.post("/api/business-config/preflight", json=wire,
                                 headers=await login(client))
    assert response.json()["components"]["llm"] == {"ok": True}


async def test_bootstrap_creates_once_then_409(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    response = await client.post("/api/bootstrap", json=sample_wire(), headers=admin_headers())
    assert response.status_code == 200, response.text
    assert response.headers["x-business-config-revision"] == "1"
    assert set(response.json()) == {"persisted", "runtime_applied", "warnings", "generated"}
    assert response.json()["generated"] == {}  # every shared secret was given
    before = await snapshot(redis_client)
    again = await client.post("/api/bootstrap", json=sample_wire(jmap_username="eve"),
                              headers=admin_headers())
    assert_envelope(again, 409, "conflict")
    assert await snapshot(redis_client) == before


async def test_bootstrap_input_errors(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    worker = {"Authorization": "Bearer worker-token-SECRET"}
    assert_envelope(await client.post("/api/bootstrap", json=sample_wire(), headers=worker),
                    401, "unauthorized")
    assert_envelope(await client.post("/api/bootstrap", content=b"x", headers=admin_headers()),
                    400, "invalid_request")
    assert_envelope(await client.post("/api/bootstrap", json={"bot_token": "x"},
                                      headers=admin_headers()), 422, "invalid_configuration")
    assert_envelope(await client.post("/api/bootstrap", json=sample_wire(timezone="X/Y"),
                                      headers=admin_headers()), 422, "invalid_configuration")
    assert await snapshot(redis_client) == (None, None)


async def test_warnings_never_contain_credentials(client: httpx.AsyncClient) -> None:
    response = await first_save(client, jmap_session_url="https://127.0.0.1:1/x")
    text = json.dumps(response.json()["warnings"])
    assert "jmap-password-SECRET" not in text


async def test_a_rule_error_names_its_field_and_never_echoes_a_line_break(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    """Catches a rule's unknown key echoed into the `x-config-error` header: a key holding a
    line break would split the header (header injection), and one in Chinese would drop it."""
    await first_save(client)
    before = await snapshot(redis_client)
    for key in ("x\r\nSet-Cookie: a=b", "x\nX-Evil: 1", "名字"):
        response = await client.put(
            "/api/business-config", headers=await login(client),
            json={"notify_rules": [{"name": "n", key: 1}]})
        assert_envelope(response, 422, "invalid_configuration")
        header = response.headers["x-config-error"]
        assert header == "NOTIFY_RULES[0] has an unknown field", header
        assert "set-cookie" not in response.headers and "x-evil" not in response.headers
    response = await client.put(
        "/api/business-config", headers=await login(client),
        json={"notify_rules": [{"name": "n", "colour": "red"}]})
    assert response.headers["x-config-error"] == "NOTIFY_RULES[0] has an unknown field: colour"
    response = await client.put(
        "/api/business-config", headers=await login(client),
        json={"notify_rules": [{"name": "n", "chat_id": 999}]})
    assert response.headers["x-config-error"] == "NOTIFY_RULES[0].chat_id must be in CHAT_ALLOWLIST"
    assert await snapshot(redis_client) == before


async def test_a_bot_token_with_a_control_character_is_refused_and_never_probed(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    """Catches a bot token holding a line break or another control character: it was stored,
    and every probe built a URL httpx refuses (`InvalidURL`, not an `HTTPError`), so
    `/debug/telegram` answered 500 (found by the schema fuzzing)."""
    await first_save(client)
    before = await snapshot(redis_client)
    for token in ("123456:abc\ndef", "123456:abc\x00", "123456:abc def", "123456:äbc"):
        response = await client.put("/api/business-config", headers=await login(client),
                                    json={"bot_token": token})
        assert_envelope(response, 422, "invalid_configuration")
        assert response.headers["x-config-error"] == \
            "BOT_TOKEN may contain only printable ASCII characters, no space"
    assert await snapshot(redis_client) == before


async def test_the_telegram_probe_answers_for_a_token_no_url_can_hold() -> None:
    """Catches the probe raising `InvalidURL` for a stored token (one saved before the rule
    above) instead of answering that the probe failed."""
    cfg = parse_wire(sample_wire(bot_token="123456:abc\x7f", telegram_api_base_url="http://127.0.0.1:9"))
    failure = await telegram_get_me_failure(cfg)
    assert failure is not None and failure.detail == "telegram get_me probe failed"
