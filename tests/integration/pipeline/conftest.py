"""A configured, enabled app wired to the real peers (Cyrus JMAP, the Bot API emulator)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import redis.asyncio as aioredis

from messageweave import runtime
from messageweave.services import Services
from tests.helpers import CYRUS_USER, enqueue_mail, running_client, settings_for
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator
from tests.served import ServedApp, served_app


def subject_of(text: str) -> str:
    """The subject line of a three-line notification."""
    return text.split("\n")[1].removeprefix("Subject: ")


async def enqueue_mails(redis: aioredis.Redis, cyrus: CyrusServer, prefix: str,
                        count: int) -> dict[str, str]:
    """Append `count` mails to Cyrus and queue them; subject → stream entry id."""
    by_subject = {}
    for n in range(count):
        subject = f"{prefix} {n:03d}"
        email_id = cyrus.append(subject=subject).email_id
        # The reconcile's own enqueue (dedup claim + XADD): a pass the app runs by itself
        # (at start, a catch-up) must not queue these a second time.
        by_subject[subject] = str(await enqueue_mail(redis, CYRUS_USER, email_id))
    return by_subject


@pytest.fixture
async def cron_only(
    embedded_redis_url: str, redis_client: aioredis.Redis, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator, trust_cyrus: None, monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[ServedApp]:
    """A configured instance whose continuous worker never runs, and no other worker on its
    Redis: whatever reaches Telegram was sent by a request to this app (`POST /worker`) or by
    a `Worker` the test drives itself."""

    async def no_worker(svc: Services) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(runtime, "run_worker", no_worker)
    async with running_client(settings_for(embedded_redis_url)) as client, served_app(
            client, redis_client, cyrus, telegram_emulator) as app:
        yield app


@asynccontextmanager
async def worker_services(redis_url: str) -> AsyncIterator[Services]:
    """The stored configuration loaded into services of our own, wired like `messageweave
    drain`, for tests that drive a `Worker` directly."""
    async with runtime.running(settings_for(redis_url)) as svc:
        assert svc.runtime is not None
        yield svc

