"""`messageweave diagnose` and `messageweave test-notify` as an operator runs them."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import certifi
import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.store import keys
from messageweave.store.account_keys import AccountKeys
from tests.helpers import (
    ADMIN_KEY,
    closed_port,
    console_script,
    eventually,
    free_port,
    login,
    run_cli,
)
from tests.integration.mailbox.push_server import PushServer, callback_path
from tests.integration.test_accounts import family_wire
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator
from tests.served import peer_wire, peer_wire_for


def _env(redis_url: str, cyrus: CyrusServer) -> dict[str, str]:
    return {"REDIS_URL": redis_url, "CONFIG_ENCRYPTION_KEY": ADMIN_KEY,
            "SSL_CERT_FILE": str(cyrus.ca_file)}


async def _configure(client: httpx.AsyncClient, wire: dict[str, object]) -> None:
    session = await login(client)
    assert (await client.put("/api/business-config", headers=session,
                             json=wire)).status_code == 200
    assert (await client.put("/api/enabled", headers=session,
                             json={"enabled": True})).status_code == 200


async def test_diagnose_passes_on_a_healthy_setup(
    client: httpx.AsyncClient, embedded_redis_url: str, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> None:
    """Catches (issue #34) also a queue line that reads like a backlog ("18 entries, 0
    pending" for a delivered history): it says what waits, what is being sent, what is done."""
    await _configure(client, peer_wire(cyrus, telegram_emulator))
    code, out = await run_cli("diagnose", **_env(embedded_redis_url, cyrus))
    assert code == 0, out
    for name in ("redis", "configuration", "enabled", "jmap session", "telegram getMe",
                 "queue stalwart:jmap"):
        assert f"ok   {name}" in out, out
    assert re.search(r"queue stalwart:jmap: 0 waiting, 0 being sent or retried, \d+ done and "
                     r"kept in history, 0 in the DLQ", out), out
    assert "warn telegram webhook" in out and "all checks passed" in out


async def test_diagnose_warns_when_every_member_of_the_notification_group_may_read(
    client: httpx.AsyncClient, embedded_redis_url: str, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> None:
    """Catches a group as `telegram_chat_id` with no owner listed passing in silence (issue
    #32): every member of it may read the whole mailbox and send as the owner."""
    group = -1_001_234_567_890
    await _configure(client, peer_wire(cyrus, telegram_emulator, telegram_chat_id=group))
    _, out = await run_cli("diagnose", **_env(embedded_redis_url, cyrus))
    assert "warn owners: the notification chat is a group and no owner is listed" in out, out
    assert "Find my chat" in out
    session = await login(client)
    assert (await client.put("/api/business-config", headers=session,
                             json={"owner_user_ids": [4242]})).status_code == 200
    _, out = await run_cli("diagnose", **_env(embedded_redis_url, cyrus))
    assert "ok   owners: 1 Telegram user(s) listed" in out, out


async def test_diagnose_fails_with_a_remedy_when_telegram_rejects_the_token(
    client: httpx.AsyncClient, embedded_redis_url: str, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> None:
    wire = peer_wire(cyrus, telegram_emulator)
    await telegram_emulator.reject_token(str(wire["bot_token"]))
    await _configure(client, wire)
    code, out = await run_cli("diagnose", **_env(embedded_redis_url, cyrus))
    assert code == 1
    assert "fail telegram getMe: telegram get_me probe failed" in out
    assert "check the bot token" in out and str(wire["bot_token"]) not in out


@pytest.mark.parametrize(("case", "cause", "remedy"), [
    ("untrusted certificate", "the server's certificate is not trusted", "jmap_ca_pem"),
    ("wrong password", "the server refused the username or password (HTTP 401)",
     "check jmap_username and jmap_password"),
    ("nothing listening", "connection refused by https://127.0.0.1:",
     "check jmap_session_url and that the server is up"),
])
async def test_diagnose_names_why_the_mail_server_was_not_reached(
    client: httpx.AsyncClient, embedded_redis_url: str, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator, trust_cyrus: None, case: str, cause: str, remedy: str,
) -> None:
    """Catches one generic line ("jmap session probe failed", check the URL, username and
    password) whatever went wrong: a self-signed certificate, a wrong password and a server that
    is not there each need their own fix, and the operator must be told which."""
    overrides: dict[str, object] = {
        "wrong password": {"jmap_password": "wrong-SECRET"},
        "nothing listening": {"jmap_session_url": f"https://127.0.0.1:{closed_port()}/"},
    }.get(case, {})
    await _configure(client, peer_wire(cyrus, telegram_emulator, **overrides))
    env = _env(embedded_redis_url, cyrus)
    if case == "untrusted certificate":  # public CAs only, as on a host that never saw Cyrus's
        env.update(SSL_CERT_FILE=certifi.where(), SSL_CERT_DIR="/nonexistent")
    code, out = await run_cli("diagnose", **env)
    assert code == 1, out
    assert f"fail jmap session: jmap session probe failed: {cause}" in out, out
    assert remedy in out and "wrong-SECRET" not in out


async def test_diagnose_fails_when_nothing_is_configured(
    redis_client: aioredis.Redis, embedded_redis_url: str, cyrus: CyrusServer,
) -> None:
    code, out = await run_cli("diagnose", **_env(embedded_redis_url, cyrus))
    assert code == 1
    assert "fail configuration: nothing configured yet" in out
    assert "messageweave bootstrap" in out


async def test_diagnose_fails_when_redis_is_down(cyrus: CyrusServer) -> None:
    code, out = await run_cli("diagnose", **_env(f"redis://127.0.0.1:{closed_port()}/0", cyrus))
    assert code == 1
    assert "fail redis" in out and "check REDIS_URL" in out


async def test_diagnose_fails_without_the_environment(tmp_path: Path) -> None:
    # An empty data directory: a developer's own `.messageweave` must not stand in for it.
    code, out = await run_cli("diagnose", "--data-dir", str(tmp_path))
    assert code == 1 and "REDIS_URL, CONFIG_ENCRYPTION_KEY" in out


async def test_test_notify_sends_to_the_chosen_chat(
    client: httpx.AsyncClient, embedded_redis_url: str, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> None:
    wire = peer_wire(cyrus, telegram_emulator, chat_allowlist=[4242, 5])
    await _configure(client, wire)
    code, out = await run_cli("test-notify", "--chat", "5", "--text", "hello ops",
                              **_env(embedded_redis_url, cyrus))
    assert code == 0, out
    sent = await telegram_emulator.sent_messages(str(wire["bot_token"]), 5)
    assert [m.text for m in sent] == ["hello ops"]
    code, out = await run_cli("test-notify", "--chat", "6", **_env(embedded_redis_url, cyrus))
    assert code == 1 and "not in the allowlist" in out


@pytest.fixture
async def push_server(cyrus: CyrusServer, trust_cyrus: None) -> AsyncIterator[PushServer]:
    async with PushServer(cyrus) as server:
        yield server


async def test_diagnose_shows_push_ok_then_degraded_with_a_remedy(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, embedded_redis_url: str,
    cyrus: CyrusServer, push_server: PushServer, telegram_emulator: TelegramEmulator,
) -> None:
    """Bug caught (issue #11): diagnose said "registered" for a registration whose
    subscription the server had lost; it must say degraded, why, and what to do."""
    callback = "https://bot.example.org/push/jmap"
    await _configure(client, peer_wire_for(push_server.url, telegram_emulator))
    session = await login(client)
    sub_id = (await client.post("/api/push/register", headers=session,
                                json={"callback_url": callback})).json()["push_subscription_id"]
    verification = {"@type": "PushVerification", "pushSubscriptionId": sub_id,
                    "verificationCode": push_server.responder.codes[sub_id]}
    pushed_to = callback_path(push_server.responder.subscriptions[sub_id]["url"])
    assert (await client.post(pushed_to, json=verification)).status_code == 204
    pushed = time.time()
    assert (await client.post(pushed_to, json={
        "@type": "StateChange", "changed": {"u1": {"Email": "s2"}}})).status_code == 204
    code, out = await run_cli("diagnose", **_env(embedded_redis_url, cyrus))
    assert code == 0, out
    assert f"ok   jmap push: ok (subscription {sub_id}, expires " in out, out
    # The age is the real one: at most the time since the push (a loaded machine starts the
    # CLI slowly, so the bound is measured, not assumed).
    age = re.search(r"last StateChange (\d+) s ago", out)
    assert age is not None, out
    assert 0 <= int(age.group(1)) <= math.ceil(time.time() - pushed), out

    push_server.responder.restart()
    push_server.responder.refuse_creates = True
    await redis_client.delete(keys.PUSH_MAINTENANCE_SCHEDULE)  # the next pass, now
    async def failed() -> bool:
        return await redis_client.hget(keys.PUSH_LIFECYCLE, "failure") is not None
    await eventually(failed, "the maintenance pass recording its failure", 5)
    code, out = await run_cli("diagnose", **_env(embedded_redis_url, cyrus))
    assert code == 0, out  # a warning: mail still arrives by the degraded reconcile
    assert "warn jmap push: degraded: subscription lost, re-create failed" in out, out
    assert "new mail waits for the reconcile every 30 s" in out
    assert "answers PushSubscription/get and /set" in out


async def _healthy(url: str, proc: asyncio.subprocess.Process) -> None:
    """Until `url/healthz` answers 200 (fails when `proc` exits first or 20 s pass)."""
    deadline = time.monotonic() + 20
    async with httpx.AsyncClient(timeout=1) as client:
        while True:
            assert proc.returncode is None, "messageweave run exited early"
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(url + "/healthz")).status_code == 200:
                    return
            assert time.monotonic() < deadline, "messageweave run never became healthy"
            await asyncio.sleep(0.1)


async def test_diagnose_with_no_arguments_is_all_ok_next_to_the_instance_run_started(
    tmp_path: Path, push_server: PushServer, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator,
) -> None:
    """Bug caught (issue #15, "done when"): a new user who started `messageweave run` and set
    it up on the page ran `messageweave diagnose` in the same directory and got "missing
    REDIS_URL, CONFIG_ENCRYPTION_KEY"; with no argument and no environment it must find the
    embedded instance and pass every check. The mail server's certificate is trusted through
    `jmap_ca_pem` alone (no SSL_CERT_FILE anywhere)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("REDIS_URL", "CONFIG_ENCRYPTION_KEY", "PORT", "DEBUG_ENABLED",
                        "DEBUG_TOKEN", "SSL_CERT_FILE", "SSL_CERT_DIR", "XDG_DATA_HOME")}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = await asyncio.create_subprocess_exec(
        console_script("messageweave"), "run", "--port", str(port), cwd=tmp_path, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    try:
        await _healthy(url, proc)
        key = (tmp_path / ".messageweave" / "encryption.key").read_text().strip()
        wire = peer_wire_for(push_server.url, telegram_emulator,
                             jmap_ca_pem=cyrus.ca_file.read_text())
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            login_ = await client.post("/api/admin/session",
                                       headers={"Authorization": f"Bearer {key}"})
            assert login_.status_code == 200, login_.text
            session = {"Authorization": f"Bearer {login_.json()['session']}"}
            saved = await client.put("/api/business-config", headers=session, json=wire)
            assert saved.status_code == 200 and saved.json()["runtime_applied"], saved.text
            assert (await client.put("/api/enabled", headers=session,
                                     json={"enabled": True})).status_code == 200
            hooked = await client.post("/api/telegram/register-webhook", headers=session,
                                       json={"callback_url": "https://bot.example.org/webhook/tg"})
            assert hooked.status_code == 200, hooked.text
            registered = await client.post("/api/push/register", headers=session,
                                           json={"callback_url": "https://bot.example.org/push/jmap"})
            assert registered.status_code == 200, registered.text
            sub_id = registered.json()["push_subscription_id"]
            pushed_to = callback_path(push_server.responder.subscriptions[sub_id]["url"])
            verified = await client.post(pushed_to, json={
                "@type": "PushVerification", "pushSubscriptionId": sub_id,
                "verificationCode": push_server.responder.codes[sub_id]})
            assert verified.status_code == 204, verified.text

            # What the page shows once the receiving instance has looked at Telegram (it
            # wakes within `polling.IDLE_S` of the switch): diagnose run before that rightly
            # says "no instance is receiving Telegram updates yet" (stop 30's local run did).
            async def receiving() -> bool:
                status = await client.get("/api/push/status", headers=session)
                return status.status_code == 200 and status.json()["updates"] == "ok (webhook)"

            await eventually(receiving, "the instance reporting the registered webhook", 15)
        done = await asyncio.create_subprocess_exec(
            console_script("messageweave"), "diagnose", cwd=tmp_path,
            env={**env, "COLUMNS": "200"}, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT)
        out = (await asyncio.wait_for(done.communicate(), 60))[0].decode()
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 20)
    assert done.returncode == 0, out
    assert "all checks passed" in out, out
    assert not [line for line in out.splitlines() if line.startswith(("warn", "fail"))], out


async def test_diagnose_counts_every_accounts_queue_and_a_paused_defaults_push_as_off(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, embedded_redis_url: str,
    cyrus: CyrusServer, telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> None:
    """Catches `diagnose` reading `default`'s mail stream alone and a paused `default`'s push
    as its stopped holder last wrote it (issue #35): another account's waiting and
    dead-lettered mail showed nowhere, and a paused `default` said "ok (eventsource)" while
    nothing listened, as `/ready` did before it said "off"."""
    await _configure(client, peer_wire(cyrus, telegram_emulator, push_mode="eventsource"))
    admin = await login(client)

    async def listening() -> bool:
        status = await client.get("/api/push/status", headers=admin)
        return str(status.json().get("in_force")).startswith("ok")
    await eventually(listening, "default's EventSource connected")
    created = await client.post("/api/accounts", headers=admin, json=family_wire())
    assert created.status_code == 201, created.text
    paused = await client.put("/api/accounts/default/enabled", headers=admin,
                              json={"enabled": False})
    assert paused.status_code == 200, paused.text
    stream = AccountKeys("family").stream_jmap
    for n in range(2):
        await redis_client.xadd(stream, {"email_id": f"M{n:024x}"})
    await redis_client.xadd(keys.dlq(stream), {"payload": "{}"})

    _, out = await run_cli("diagnose", COLUMNS="200", **_env(embedded_redis_url, cyrus))
    line = re.search(r"warn queue stalwart:jmap \(account family\): (\d+) waiting, (\d+) "
                     r"being sent or retried, 0 done and kept in history, 1 in the DLQ", out)
    assert line is not None, out
    # the app's worker may have read them already (family's mail server is a closed port)
    assert int(line[1]) + int(line[2]) == 2, out
    assert "messageweave dlq --account family" in out, out
    assert "ok   queue stalwart:jmap: " in out, out  # default's, named as before
    assert "warn jmap push: off" in out, out
