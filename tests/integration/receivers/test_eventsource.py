"""JMAP push through EventSource (issue #22), against the real Cyrus (the harness runs its
patched copy of httpd, whose EventSource works) and the real Bot API emulator: mail delivered
over LMTP reaches the chat with no callback URL, no `POST /push/jmap` and no periodic pass."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.store import keys, receivers
from tests.helpers import FreshUser, eventually, until_label
from tests.peers.cyrus import CyrusServer, make_message
from tests.peers.telegram import TelegramEmulator
from tests.served import ServedApp, served_app


@pytest.fixture
async def pushed(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator, trust_cyrus: None, fresh: FreshUser,
) -> AsyncIterator[ServedApp]:
    """The app on a fresh mailbox with the default `push_mode` (`auto`), no periodic reconcile
    and no audit: only EventSource can bring its mail. Ready once the first (baseline) pass,
    asked for by the EventSource's connect, has run."""
    async with served_app(client, redis_client, cyrus, telegram_emulator, push_mode="auto",
                          jmap_username=fresh.user, jmap_password=fresh.password,
                          reconcile_interval_s=0, audit_interval_s=0) as app:
        await until_label(client, "push", "ok (eventsource)")

        async def baselined() -> bool:
            return await redis_client.exists(keys.RECONCILE_CURSOR) == 1
        await eventually(baselined, "the first pass after the connect")
        yield app


def deliver(app: ServedApp, subject: str) -> None:
    app.cyrus.deliver(make_message(subject=subject, to=f"{app.wire['jmap_username']}@localhost"),
                      user=str(app.wire["jmap_username"]))


async def notified(app: ServedApp) -> Counter[str]:
    """How many notifications named each subject."""
    subjects: Counter[str] = Counter()
    for message in await app.emulator.sent_messages(app.token, app.chat):
        for line in message.text.split("\n"):
            if line.startswith("Subject: ") or line.startswith("主题："):
                subjects[line.split(" ", 1)[-1].split("：", 1)[-1]] += 1
    return subjects


async def until_notified(app: ServedApp, *subjects: str) -> None:
    async def all_there() -> bool:
        seen = await notified(app)
        return all(any(s in key for key in seen) for s in subjects)
    await eventually(all_there, f"notifications of {subjects}", 30)


def once_each(seen: Counter[str], *subjects: str) -> bool:
    return all(sum(n for key, n in seen.items() if s in key) == 1 for s in subjects)


async def test_lmtp_delivery_reaches_the_chat_through_eventsource(pushed: ServedApp) -> None:
    """Catches: the session's `eventSourceUrl` parsed and never used, so mail waited for a
    periodic pass (here there is none: without EventSource nothing would ever come)."""
    deliver(pushed, "Through EventSource")
    await until_notified(pushed, "Through EventSource")
    assert await pushed.redis.get(keys.PUSH_LAST_STATE_CHANGE) is None  # no /push/jmap
    status = await receivers.read_status(pushed.redis, keys.EVENTSOURCE_STATUS)
    assert status is not None and status.state == "connected"
    assert once_each(await notified(pushed), "Through EventSource")


async def test_cyrus_restarted_while_connected_loses_and_doubles_nothing(
    pushed: ServedApp,
) -> None:
    """Catches: an EventSource that never reconnects after the server went away, and mail that
    came while it was away waiting for a periodic pass (the server sends no state on connect:
    the reconnect itself must ask for a catch-up)."""
    deliver(pushed, "Before the restart")
    await until_notified(pushed, "Before the restart")
    cyrus = pushed.cyrus
    await asyncio.to_thread(cyrus.restart)
    deliver(pushed, "Right after the restart")  # most likely before we are back
    await until_label(pushed.client, "push", "ok (eventsource)", 60)
    await until_notified(pushed, "Right after the restart")
    deliver(pushed, "After the reconnect")
    await until_notified(pushed, "After the reconnect")
    seen = await notified(pushed)
    assert once_each(seen, "Before the restart", "Right after the restart",
                     "After the reconnect"), seen


async def test_push_mode_off_holds_no_eventsource(pushed: ServedApp) -> None:
    """Catches: `push_mode: off` (or `subscription`) still holding the server's EventSource,
    and `/ready` claiming a push that is not there."""
    await pushed.configure(push_mode="off")
    await until_label(pushed.client, "push", "off")

    async def released() -> bool:
        status = await receivers.read_status(pushed.redis, keys.EVENTSOURCE_STATUS)
        return (status is not None and status.state == "off"
                and not await pushed.redis.exists(keys.EVENTSOURCE_LOCK))
    await eventually(released, "the EventSource closed and its lease released")
