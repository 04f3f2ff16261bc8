"""Each debug route's answers, against real Redis, Cyrus JMAP and the Bot API emulator."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import httpx
import redis.asyncio as aioredis

from messageweave.store import keys
from messageweave.store.redis import redis_server_binary
from tests.helpers import (
    DEBUG_TOKEN,
    assert_envelope,
    closed_port,
    debug_headers,
    free_port,
    login,
    running_client,
    sample_wire,
    settings_for,
)
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator
from tests.served import peer_wire

H = debug_headers()


async def _configure(client: httpx.AsyncClient, wire: dict[str, object]) -> None:
    saved = await client.put("/api/business-config", headers=await login(client), json=wire)
    assert saved.status_code == 200, saved.text


async def test_config_before_anything_is_configured(debug_client: httpx.AsyncClient) -> None:
    response = await debug_client.get("/debug/config", headers=H)
    assert response.json() == {"revision": 0, "setup_missing": [], "business_configured": False,
                               "allowlist_size": 0}


async def test_config_shows_settings_and_only_the_presence_of_secrets(
    debug_client: httpx.AsyncClient, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
    trust_cyrus: None,
) -> None:
    wire = peer_wire(cyrus, telegram_emulator, telegram_chat_id=4242, chat_allowlist=[4242, 7])
    await _configure(debug_client, wire)
    response = await debug_client.get("/debug/config", headers=H)
    body = response.json()
    assert body["business_configured"] is True and body["revision"] == 1
    assert body["allowlist_size"] == 2
    assert body["jmap"] == {"session_url": wire["jmap_session_url"], "username": "alice",
                            "account_id": None}
    assert body["telegram"] == {"chat_id": 4242, "webhook_secret_configured": True}
    assert body["worker"] == {"worker_token_configured": True,
                              "reconcile_token_configured": True}
    assert body["llm"] == {"enabled": False, "allow_net": False, "api_key_configured": False,
                           "base_url": None, "model": None}
    assert body["outbound"] == {"jmap_timeout_ms": 15000, "telegram_timeout_ms": 10000,
                                "llm_timeout_ms": 30000, "max_retries": 3}
    # (Cyrus's password is the word "secret", which the body rightly contains as a field name.)
    for name in ("bot_token", "telegram_webhook_secret", "reconcile_token", "worker_token"):
        assert str(wire[name]) not in response.text


async def test_redis_reachable_reports_the_global_switch(
    debug_client: httpx.AsyncClient, redis_client: aioredis.Redis,
) -> None:
    assert (await debug_client.get("/debug/redis", headers=H)).json() == {
        "reachable": True, "global_enabled": False}
    await redis_client.set(keys.ENABLED, "1")
    assert (await debug_client.get("/debug/redis", headers=H)).json() == {
        "reachable": True, "global_enabled": True}


async def test_redis_unreachable_is_a_200_with_io_error() -> None:
    settings = settings_for(f"redis://127.0.0.1:{closed_port()}/0", debug_requested=True,
                            debug_token=DEBUG_TOKEN)
    async with running_client(settings) as client:
        response = await client.get("/debug/redis", headers=H)
    assert response.status_code == 200
    assert response.json() == {"reachable": False, "detail": "io_error"}


async def test_redis_wrong_password_is_authentication_failed(tmp_path: Path) -> None:
    port = free_port()
    server = await asyncio.create_subprocess_exec(
        redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
        "--dir", str(tmp_path), "--requirepass", "right-SECRET",
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        await _wait_for_port(port)
        settings = settings_for(f"redis://:wrong-SECRET@127.0.0.1:{port}/0",
                                debug_requested=True, debug_token=DEBUG_TOKEN)
        async with running_client(settings) as client:
            response = await client.get("/debug/redis", headers=H)
    finally:
        server.terminate()
        await server.wait()
    assert response.json() == {"reachable": False, "detail": "authentication_failed"}
    assert "SECRET" not in response.text


async def _wait_for_port(port: int) -> None:
    for _ in range(200):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.025)
            continue
        writer.close()
        return
    raise AssertionError("redis-server did not start")


async def test_jmap_and_telegram_probes_pass_against_the_real_peers(
    debug_client: httpx.AsyncClient, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
    trust_cyrus: None,
) -> None:
    await _configure(debug_client, peer_wire(cyrus, telegram_emulator))
    assert (await debug_client.get("/debug/jmap", headers=H)).json() == {"ok": True}
    assert (await debug_client.get("/debug/telegram", headers=H)).json() == {"ok": True}


async def test_probes_without_configuration_say_not_configured(
    debug_client: httpx.AsyncClient,
) -> None:
    jmap = await debug_client.get("/debug/jmap", headers=H)
    telegram = await debug_client.get("/debug/telegram", headers=H)
    assert (jmap.status_code, telegram.status_code) == (200, 200)
    assert (jmap.json()["detail"], jmap.json()["reason"]) == (
        "jmap session url not configured", "not_configured")
    assert (telegram.json()["detail"], telegram.json()["reason"]) == (
        "telegram bot token not configured", "not_configured")


async def test_probe_failures_are_200_answers_with_the_documented_detail(
    debug_client: httpx.AsyncClient, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
    trust_cyrus: None,
) -> None:
    wire = peer_wire(cyrus, telegram_emulator, jmap_password="wrong-SECRET")
    await telegram_emulator.reject_token(str(wire["bot_token"]))
    await _configure(debug_client, wire)
    jmap = await debug_client.get("/debug/jmap", headers=H)
    telegram = await debug_client.get("/debug/telegram", headers=H)
    assert (jmap.status_code, jmap.json()["ok"], jmap.json()["detail"]) == (
        200, False, "jmap session probe failed")
    assert (telegram.status_code, telegram.json()["ok"], telegram.json()["detail"]) == (
        200, False, "telegram get_me probe failed")
    assert jmap.json()["reason"] == telegram.json()["reason"] == "unauthorized"
    assert "wrong-SECRET" not in jmap.text and str(wire["bot_token"]) not in telegram.text


async def test_a_silent_telegram_is_a_timed_out_probe(
    debug_client: httpx.AsyncClient, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
    trust_cyrus: None,
) -> None:
    wire = peer_wire(cyrus, telegram_emulator)
    await telegram_emulator.fail(token=str(wire["bot_token"]), method="getMe", delay_ms=4000)
    await _configure(debug_client, wire)
    response = await debug_client.get("/debug/telegram", headers=H)
    body = response.json()
    assert (body["ok"], body["detail"], body["reason"]) == (
        False, "telegram get_me probe timed out", "timeout")


async def test_telegram_names_a_refused_connection_never_the_token(
    debug_client: httpx.AsyncClient, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
    trust_cyrus: None,
) -> None:
    """Catches: `/debug/telegram` answering only "telegram get_me probe failed" whatever went
    wrong (issue #34: the operator was sent to the bot token while the Bot API refused the
    connection); its cause must say "connection refused" with the host and port, and nothing
    in the answer may hold the token or the URL's path."""
    wire = peer_wire(cyrus, telegram_emulator,
                     telegram_api_base_url=f"http://127.0.0.1:{closed_port()}")
    await _configure(debug_client, wire)
    response = await debug_client.get("/debug/telegram", headers=H)
    body = response.json()
    assert (response.status_code, body["ok"], body["reason"]) == (200, False, "refused")
    assert body["cause"].startswith("connection refused (127.0.0.1:"), body
    assert "bot token" not in body["remedy"], body
    assert str(wire["bot_token"]) not in response.text and "/bot" not in response.text


async def test_worker_shows_revision_cursor_and_outbound(
    debug_client: httpx.AsyncClient, redis_client: aioredis.Redis,
) -> None:
    assert (await debug_client.get("/debug/worker", headers=H)).json() == {
        "revision": 0, "reconcile_cursor": None, "outbound": None}
    await _configure(debug_client, sample_wire())
    await redis_client.set(keys.RECONCILE_CURSOR, "state-42")
    body = (await debug_client.get("/debug/worker", headers=H)).json()
    assert body["revision"] == 1 and body["reconcile_cursor"] == "state-42"
    assert body["outbound"]["max_retries"] == 3


async def test_notify_without_a_runtime_is_503(debug_client: httpx.AsyncClient) -> None:
    response = await debug_client.post("/debug/notify", headers=H)
    assert_envelope(response, 503, "service_unavailable")
    assert response.headers["retry-after"] == "30"


async def test_notify_sends_the_default_text_to_the_configured_chat(
    debug_client: httpx.AsyncClient, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
    trust_cyrus: None,
) -> None:
    wire = peer_wire(cyrus, telegram_emulator, telegram_chat_id=4242)
    await _configure(debug_client, wire)
    response = await debug_client.post("/debug/notify", headers=H)
    text = "messageweave debug: outbound test OK"
    assert response.json() == {"ok": True, "chat_id": 4242, "chars": len(text)}
    sent = await telegram_emulator.sent_messages(str(wire["bot_token"]), 4242)
    assert [m.text for m in sent] == [text]


async def test_notify_truncates_text_to_1024_chars_and_takes_an_allowed_chat(
    debug_client: httpx.AsyncClient, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
    trust_cyrus: None,
) -> None:
    wire = peer_wire(cyrus, telegram_emulator, telegram_chat_id=4242, chat_allowlist=[4242, 77])
    await _configure(debug_client, wire)
    response = await debug_client.post("/debug/notify", headers=H,
                                       params={"chat_id": "77", "text": "é" * 2000})
    assert response.json() == {"ok": True, "chat_id": 77, "chars": 1024}
    sent = await telegram_emulator.sent_messages(str(wire["bot_token"]), 77)
    assert [m.text for m in sent] == ["é" * 1024]


async def test_notify_to_a_chat_outside_the_allowlist_is_403(
    debug_client: httpx.AsyncClient, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
    trust_cyrus: None,
) -> None:
    wire = peer_wire(cyrus, telegram_emulator)
    await _configure(debug_client, wire)
    response = await debug_client.post("/debug/notify", headers=H, params={"chat_id": 999})
    assert_envelope(response, 403, "chat_not_allowed")
    assert await telegram_emulator.sent_messages(str(wire["bot_token"]), 999) == []


async def test_notify_with_a_non_numeric_chat_is_400(
    debug_client: httpx.AsyncClient, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
    trust_cyrus: None,
) -> None:
    await _configure(debug_client, peer_wire(cyrus, telegram_emulator))
    response = await debug_client.post("/debug/notify", headers=H, params={"chat_id": "x"})
    assert_envelope(response, 400, "invalid_request")


async def test_notify_that_telegram_refuses_is_502(
    debug_client: httpx.AsyncClient, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
    trust_cyrus: None,
) -> None:
    wire = peer_wire(cyrus, telegram_emulator)
    await telegram_emulator.fail(token=str(wire["bot_token"]), method="sendMessage",
                                 error_code=403)
    await _configure(debug_client, wire)
    assert_envelope(await debug_client.post("/debug/notify", headers=H), 502,
                    "telegram_send_failed")
