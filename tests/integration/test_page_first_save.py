"""Issue #34 item 1: the page's first save needs no hand-made token.

`PUT /api/business-config` with nothing stored generates `telegram_webhook_secret`,
`reconcile_token` and `worker_token` when the patch leaves them out (as `POST /api/bootstrap`
does), shows them once in its answer and never in a log; a blank one is still refused with the
contract's message; "Test connection" of a first setup needs them no more than the save; and the
generated webhook secret is the one a webhook registration gives Telegram. The real app on real
Redis, the Bot API emulator for the webhook.
"""

from __future__ import annotations

import logging
import secrets

import httpx
import pytest
import redis.asyncio as aioredis
import uvicorn

from messageweave.app import create_app
from messageweave.config.model import GENERATED_SECRETS
from tests.helpers import (
    assert_envelope,
    free_port,
    login,
    sample_wire,
    serving,
    settings_for,
    snapshot,
)
from tests.integration.security.test_secret_strength import (
    assert_generated_once,
    stored_wire,
    without_generated,
)
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator
from tests.served import lift_limits

BIZ = "/api/business-config"


async def test_a_first_save_without_the_shared_secrets_generates_them_once(
    client: httpx.AsyncClient, embedded_redis_url: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """Catches the page's first save refused with "Required: Webhook secret, Reconcile token,
    Worker token" (422 `missing field`) although a home user needs none of them: left out, they
    are generated, strong, stored, shown in this answer only (no-store), in no log record, and
    the generated worker token opens the worker route."""
    caplog.set_level(logging.DEBUG)
    headers = await login(client)
    response = await client.put(BIZ, headers=headers, json=without_generated())
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "no-store"
    generated = await assert_generated_once(response, client, embedded_redis_url, caplog)
    read = await client.get(BIZ, headers=await login(client))
    assert all(read.json()["secrets_present"][name] for name in GENERATED_SECRETS)
    worker = await client.post("/worker",
                               headers={"Authorization": f"Bearer {generated['worker_token']}"})
    assert worker.status_code not in (401, 403), worker.text


async def test_a_later_save_keeps_the_secrets_and_generates_nothing(
    client: httpx.AsyncClient, embedded_redis_url: str,
) -> None:
    """Catches generation running on every save (a patch that leaves the secrets out must
    keep the stored ones: the cron and the gateway hold them), and a secret the first save
    names being replaced."""
    headers = await login(client)
    first = await client.put(BIZ, headers=headers,
                             json={**without_generated(), "worker_token": "w" * 20})
    assert set(first.json()["generated"]) == {"telegram_webhook_secret", "reconcile_token"}
    before = await stored_wire(embedded_redis_url)
    assert before["worker_token"] == "w" * 20
    later = await client.put(BIZ, headers=headers, json={"jmap_username": "bob"})
    assert later.status_code == 200, later.text
    assert "generated" not in later.json()
    after = await stored_wire(embedded_redis_url)
    assert {n: after[n] for n in GENERATED_SECRETS} == {n: before[n] for n in GENERATED_SECRETS}


@pytest.mark.parametrize("name", GENERATED_SECRETS)
async def test_a_blank_shared_secret_is_still_refused_with_its_message(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, name: str,
) -> None:
    """Catches a wire that sends a secret blank being given a generated one: only a field
    left out is generated; one sent blank keeps the contract's `missing or blank` 422 and
    nothing is stored."""
    message = {"telegram_webhook_secret": "TG_WEBHOOK_SECRET"}.get(name, name.upper())
    response = await client.put(BIZ, headers=await login(client),
                                json={**without_generated(), name: ""})
    assert_envelope(response, 422, "invalid_configuration")
    assert response.headers["x-config-error"] == f"missing or blank {message}"
    assert await snapshot(redis_client) == (None, None)


async def test_test_connection_of_a_first_setup_needs_no_shared_secret(
    client: httpx.AsyncClient, redis_client: aioredis.Redis,
) -> None:
    """Catches "Test connection" before the first save answering "not a configuration"
    for the form a save now accepts (the secrets left out): it validates and probes, and
    stores nothing, generated secrets included."""
    response = await client.post(BIZ + "/preflight", headers=await login(client),
                                 json=without_generated())
    body = response.json()
    assert body["validation"] == {"ok": True, "errors": []}, body
    assert body["components"]["jmap"]["ok"] is False  # sample_wire's JMAP port is closed
    assert "generated" not in body
    assert await snapshot(redis_client) == (None, None)


async def test_a_webhook_registered_after_a_first_save_without_secrets_is_accepted(
    redis_client: aioredis.Redis, embedded_redis_url: str, cyrus: CyrusServer,
    tls_emulator: TelegramEmulator,
) -> None:
    """Catches the webhook registration of a setup that typed no secret: it must give
    Telegram the generated secret, so that the updates Telegram sends with it are taken (not
    refused 401 forever)."""
    await lift_limits(redis_client)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(
        create_app(settings_for(embedded_redis_url)), host="127.0.0.1", port=port,
        ssl_certfile=str(cyrus.server_cert), ssl_keyfile=str(cyrus.server_key),
        log_config=None, access_log=False, lifespan="on", timeout_graceful_shutdown=3))
    token = f"{secrets.randbelow(10**9)}:{secrets.token_urlsafe(20)}"
    chat = 7_340_001
    wire = {name: value for name, value in sample_wire(
        bot_token=token, telegram_api_base_url=tls_emulator.base_url, telegram_chat_id=chat,
        chat_allowlist=[chat], telegram_updates="auto").items()
        if name not in GENERATED_SECRETS}
    url = f"https://127.0.0.1:{port}"
    async with serving(server), httpx.AsyncClient(
            base_url=url, verify=cyrus.ssl_context(), timeout=15, trust_env=False) as api:
        headers = await login(api)
        saved = await api.put(BIZ, headers=headers, json=wire)
        assert saved.status_code == 200, saved.text
        assert "telegram_webhook_secret" in saved.json()["generated"]
        enabled = await api.put("/api/enabled", headers=headers, json={"enabled": True})
        assert enabled.status_code == 200, enabled.text
        registered = await api.post("/api/telegram/register-webhook", headers=headers,
                                    json={"callback_url": f"{url}/webhook/tg"})
        assert registered.status_code == 200, registered.text
        # 204, not 401: the update came with the secret the service checks it against.
        delivery = await tls_emulator.send_user_message(token, chat, "/help")
        assert delivery.error is None and delivery.status == 204, delivery
        deliveries = await tls_emulator.webhook_deliveries(token)
        assert [d["secret_sent"] for d in deliveries] == [True], deliveries
