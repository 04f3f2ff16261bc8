"""Issue #12, item 2: the shared secrets that guard routes are strong.

`worker_token`, `reconcile_token` and `telegram_webhook_secret` need at least 16 characters
(the webhook secret only what Telegram accepts as `secret_token`); a bootstrap that leaves them
out gets generated ones, shown once in its answer (reference §5.2, §5.5). The real app with real
Redis; the CLI case runs `messageweave serve` and `messageweave bootstrap` as processes.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.config.live import ConfigService
from messageweave.config.model import GENERATED_SECRETS, MIN_TOKEN_CHARS
from messageweave.store.config_store import ConfigStore
from messageweave.store.redis import connect
from tests.helpers import (
    ADMIN_KEY,
    admin_headers,
    assert_envelope,
    login,
    run_cli,
    sample_wire,
    serve_process,
    settings_for,
    snapshot,
)

URLSAFE = re.compile(r"[A-Za-z0-9_-]+")


async def stored_wire(redis_url: str) -> dict[str, Any]:
    redis = connect(redis_url)
    try:
        service = ConfigService(ConfigStore(redis), settings_for(redis_url).encryption_key)
        _, cfg = await service.read_stored()
    finally:
        await redis.aclose()
    assert cfg is not None
    return cfg.to_wire()


def without_generated(**overrides: Any) -> dict[str, Any]:
    wire = sample_wire(**overrides)
    for name in GENERATED_SECRETS:
        del wire[name]
    return wire


@pytest.mark.parametrize(("field", "value", "message"), [
    ("worker_token", "7", "WORKER_TOKEN must be at least 16 characters"),
    ("worker_token", "x" * 15, "WORKER_TOKEN must be at least 16 characters"),
    ("reconcile_token", "reconcile", "RECONCILE_TOKEN must be at least 16 characters"),
    ("telegram_webhook_secret", "hook", "TG_WEBHOOK_SECRET must be at least 16 characters"),
    ("telegram_webhook_secret", "sixteen chars ok!",
     "TG_WEBHOOK_SECRET may contain only A-Z, a-z, 0-9, _ and -"),
    ("telegram_webhook_secret", "w" * 257, "TG_WEBHOOK_SECRET must be at most 256 characters"),
])
async def test_a_weak_shared_secret_is_refused_by_name(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, field: str, value: str,
    message: str,
) -> None:
    """Bug: the worker token could be "7" — guessable at once, and the log redactor then
    rewrote every "7" it met (`127.0.0.1` became `12<secret>.0.0.1`)."""
    session = await login(client)
    before = await snapshot(redis_client)
    for method, path, headers in (("PUT", "/api/business-config", session),
                                  ("POST", "/api/bootstrap", admin_headers())):
        response = await client.request(method, path, json=sample_wire(**{field: value}),
                                        headers=headers)
        assert_envelope(response, 422, "invalid_configuration")
        assert response.headers["x-config-error"] == message
    assert await snapshot(redis_client) == before
    # A saved configuration cannot be weakened by a patch either.
    assert (await client.put("/api/business-config", json=sample_wire(),
                             headers=session)).status_code == 200
    response = await client.put("/api/business-config", json={field: value}, headers=session)
    assert_envelope(response, 422, "invalid_configuration")
    assert response.headers["x-config-error"] == message


async def test_bootstrap_generates_the_left_out_secrets_and_shows_them_once(
    client: httpx.AsyncClient, embedded_redis_url: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """Bug: a bootstrap had to invent its own tokens (so operators typed short ones); the
    generated values must be strong, stored, in the answer once, and in no log record."""
    caplog.set_level(logging.DEBUG)
    response = await client.post("/api/bootstrap", json=without_generated(),
                                 headers=admin_headers())
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "no-store"
    await assert_generated_once(response, client, embedded_redis_url, caplog)


async def assert_generated_once(
    response: httpx.Response, client: httpx.AsyncClient, redis_url: str,
    caplog: pytest.LogCaptureFixture,
) -> dict[str, str]:
    """The three secrets an answer says it generated: distinct, strong, url-safe, stored as
    said, in no log record, and never shown again by a read; returned."""
    generated: dict[str, str] = response.json()["generated"]
    assert set(generated) == set(GENERATED_SECRETS)
    assert len(set(generated.values())) == 3
    for value in generated.values():
        assert len(value) >= MIN_TOKEN_CHARS and URLSAFE.fullmatch(value)
    stored = await stored_wire(redis_url)
    assert {name: stored[name] for name in GENERATED_SECRETS} == generated
    records = " ".join(f"{r.getMessage()} {getattr(r, 'fields', '')}" for r in caplog.records)
    assert [v for v in generated.values() if v in records] == []
    read = await client.get("/api/business-config", headers=await login(client))
    assert [v for v in generated.values() if v in read.text] == []
    return generated


async def test_bootstrap_keeps_a_given_secret_and_generates_only_the_others(
    client: httpx.AsyncClient, embedded_redis_url: str,
) -> None:
    """Bug: generation must never replace a value the operator chose."""
    body = {**without_generated(), "worker_token": "operator-chosen-worker-token"}
    response = await client.post("/api/bootstrap", json=body, headers=admin_headers())
    assert response.status_code == 200, response.text
    assert set(response.json()["generated"]) == {"telegram_webhook_secret", "reconcile_token"}
    assert (await stored_wire(embedded_redis_url))["worker_token"] == \
        "operator-chosen-worker-token"


async def test_the_bootstrap_command_prints_the_generated_secrets_once(
    redis_client: aioredis.Redis, embedded_redis_url: str, tmp_path: Path,
) -> None:
    """Bug: `messageweave bootstrap` with a file without tokens stored values the operator
    never saw, so the gateway and cron could not be configured."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(without_generated()))
    async with serve_process(embedded_redis_url) as served:
        code, out = await run_cli("bootstrap", "--file", str(config), "--url", served.url,
                                  CONFIG_ENCRYPTION_KEY=ADMIN_KEY)
    assert code == 0, out
    stored = await stored_wire(embedded_redis_url)
    for name in GENERATED_SECRETS:
        assert f"{name} = {stored[name]}" in out
        assert len(stored[name]) >= MIN_TOKEN_CHARS
        assert stored[name] not in served.stderr
