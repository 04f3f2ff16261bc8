"""Fixtures for the receivers that need no public URL (issue #22): Telegram long polling and
JMAP EventSource, against the real emulator and the real Cyrus."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
import redis.asyncio as aioredis

from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator
from tests.served import ServedApp, served_app

WAIT_S = 20.0  # for the poller, the worker, Cyrus and the emulator on a busy 2-core machine


async def until(check: Callable[[], Awaitable[bool]], what: str,
                timeout_s: float = WAIT_S) -> None:
    """Poll real state until `check()` holds (fails with `what` when time runs out)."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s} s"
        await asyncio.sleep(0.05)


async def ready_body(client: httpx.AsyncClient) -> dict[str, object]:
    response = await client.get("/ready")
    return dict(response.json()) if response.status_code == 200 else {}


async def until_label(client: httpx.AsyncClient, field: str, label: str,
                      timeout_s: float = WAIT_S) -> None:
    """Until `/ready` reports `field` (`updates`, `push`) as `label` (a prefix). `/ready`
    answers 503 while a peer's probe fails: then use `until_status`."""
    seen: list[object] = []

    async def reported() -> bool:
        response = await client.get("/ready")
        seen[:] = [response.status_code, response.headers.get("x-ready-failed"),
                   response.json()]
        return response.status_code == 200 and str(response.json().get(field, "")).startswith(
            label)
    try:
        await until(reported, f"/ready {field} {label}", timeout_s)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; /ready last answered {seen}") from None


async def until_status(app: ServedApp, field: str, label: str,
                       timeout_s: float = WAIT_S) -> None:
    """Until the admin page's status (`GET /api/push/status`) reports `field` (`updates`,
    `in_force`) as `label` (a prefix)."""
    seen: list[object] = []

    async def reported() -> bool:
        body = (await app.client.get("/api/push/status", headers=app.admin)).json()
        seen[:] = [body.get(field)]
        return str(body.get(field, "")).startswith(label)
    try:
        await until(reported, f"{field} {label}", timeout_s)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen {seen}") from None


@pytest.fixture
async def polled(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> AsyncIterator[ServedApp]:
    """The app configured with the default `telegram_updates` (`auto`) and no webhook: it
    hears the owner through getUpdates only (no one can reach it: it is served in process)."""
    async with served_app(client, redis_client, cyrus, telegram_emulator,
                          telegram_updates="auto") as app:
        await until_label(client, "updates", "ok (polling)")
        yield app
