"""The poller's status outlives its own waits (issue #34): a holder in a backoff or a
`retry_after` as long as the status key's TTL still says what it waits for."""

from __future__ import annotations

import asyncio
import time

import pytest

from messageweave.pipeline import polling
from messageweave.store import keys
from tests.helpers import until_status
from tests.served import ServedApp

TTL_S = 2  # the status key's TTL, scaled down from 60 s
RETRY_AFTER_S = 6  # Telegram's 429: a wait three times as long as the TTL


async def test_a_wait_longer_than_the_status_ttl_keeps_the_status(
    polled: ServedApp, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches: the status written once before a long wait (a 60 s backoff, a 429's
    `retry_after`, the 60 s webhook watch) expiring during it, so `/ready` and the page said
    "no instance is receiving Telegram updates yet" in the middle of a Telegram outage."""
    monkeypatch.setattr(keys, "UPDATES_STATUS_TTL_S", TTL_S)
    monkeypatch.setattr(polling, "STATUS_REFRESH_S", TTL_S / 4, raising=False)
    await polled.emulator.fail(token=polled.token, method="getUpdates", error_code=429,
                               retry_after=RETRY_AFTER_S, times=1)
    await polled.emulator.send_user_message(polled.token, polled.chat, "/help")  # ends the poll
    slow_down = "degraded: Telegram asked us to slow down"
    await until_status(polled, "updates", slow_down)
    seen: list[str] = []
    end = time.monotonic() + 2 * TTL_S  # well inside the wait, twice past the TTL
    while time.monotonic() < end:
        status = await polled.client.get("/api/push/status", headers=polled.admin)
        seen.append(status.json()["updates"])
        await asyncio.sleep(0.1)
    assert all(label.startswith(slow_down) for label in seen), sorted(set(seen))
