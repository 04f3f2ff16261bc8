"""Issue #22, part 4: a home connection that drops loses nothing (docs/reference.md §7.11).

Telegram unreachable for 6 s used to put a notification in the dead-letter queue after 4
attempts (1, 2, 4 s of backoff, `max_retries` 3); nothing retried it later and nothing said so.
Now a peer out of reach is waited for, with capped backoff, for `retry_window_s`, and the chat's
later notifications wait behind the one that waits.

The real peers throughout: the embedded Redis, Cyrus (the mails), the Bot API emulator (its
failure rules play the outage). The issue names outages of minutes, with a 5-minute backoff
cap; the suite cannot wait that long, so these tests drive a `Worker` whose backoff is scaled
down (`WorkerOptions.backoff_base_s` = 0.1 s, `backoff_cap_s` = 1 s: ×0.1 and ×1/300): an
outage of about ten seconds then runs through a dozen attempts, most of them at the cap, as one
of minutes would. `cron_only` runs no worker of its own, so every send seen here is that
worker's.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from messageweave.aio import cancel
from messageweave.cli.diagnose import run_checks
from messageweave.pipeline.worker import Worker, WorkerOptions
from messageweave.store import keys
from messageweave.store.waiting import waiting_for_peers
from tests.helpers import (
    CYRUS_USER,
    enqueue_mail,
    eventually,
    settings_for,
    subject_of,
    worker_services,
)
from tests.served import ServedApp

STREAM = keys.STREAM_JMAP
# The backoff scaled down (see the module's docstring): 0.1, 0.2, 0.4, 0.8, then 1 s apart.
SCALED = WorkerOptions(backoff_base_s=0.1, backoff_cap_s=1.0)
MAX_ATTEMPTS = 4  # the default max_retries (3) + 1: where the old code dead-lettered


@asynccontextmanager
async def _worker(redis_url: str, options: WorkerOptions = SCALED) -> AsyncIterator[Worker]:
    """A continuous worker (`Worker.run`, as `messageweave run` has) with the scaled backoff,
    on the stored configuration."""
    async with worker_services(redis_url) as svc:
        worker = Worker(svc, options=options)
        task = asyncio.create_task(worker.run(), name="test-worker")
        try:
            yield worker
        finally:
            await cancel(task)


async def _notify(app: ServedApp, subject: str) -> str:
    """A new mail in Cyrus, claimed and queued as the reconcile does it; its entry id."""
    entry = await enqueue_mail(app.redis, CYRUS_USER, app.append(subject))
    assert entry is not None
    return entry


async def _attempts(app: ServedApp, entry: str) -> int:
    return int(await app.redis.get(keys.retry_counter(STREAM, entry)) or 0)


async def _record(app: ServedApp, entry: str) -> dict[str, Any] | None:
    raw = await app.redis.get(keys.delivery_committed(STREAM, entry))
    return None if raw is None else dict(json.loads(raw))


async def _dlq(app: ServedApp) -> list[dict[str, Any]]:
    body = (await app.client.get("/api/dlq", headers=app.admin)).json()
    rows: list[dict[str, Any]] = body["entries"]
    return rows


async def test_telegram_unreachable_during_a_burst_of_20_mails_loses_none_of_them(
    cron_only: ServedApp, embedded_redis_url: str,
) -> None:
    """The issue's bug: an outage longer than the few seconds of backoff dead-lettered the
    notification after `max_retries` + 1 attempts, silently. Here Telegram drops every
    sendMessage connection while 20 mails arrive, and until the first of them has failed 12
    times (three times the old limit; with the scaled backoff most of those waits are at the
    cap, about ten seconds in all). Once it answers again all 20 arrive, each once, in the
    order they came, and nothing is dead-lettered. It also catches a later notification
    overtaking the one that waits: the chat's lane must hold them behind it."""
    app = cron_only
    await app.emulator.fail(token=app.token, method="sendMessage", close=True)
    subjects = [f"burst {n:02d}" for n in range(20)]
    async with _worker(embedded_redis_url):
        entries = [await _notify(app, subject) for subject in subjects]

        async def failed_twelve_times() -> bool:
            return await _attempts(app, entries[0]) >= 3 * MAX_ATTEMPTS

        await eventually(failed_twelve_times, "twelve failed attempts", 40)
        assert await app.emulator.sent_messages(app.token, app.chat) == []
        assert await app.redis.xlen(keys.dlq(STREAM)) == 0
        assert set(await waiting_for_peers(app.redis)) == {"telegram"}

        await app.emulator.clear_failures(app.token)  # Telegram answers again

        async def all_delivered() -> bool:
            records = [await _record(app, e) for e in entries]
            return all(r is not None and r["state"] == "delivered" for r in records)

        await eventually(all_delivered, "every entry delivered", 20)
    sent = await app.emulator.sent_messages(app.token, app.chat)
    assert [subject_of(m.text) for m in sent] == subjects  # each once, in order
    assert await _dlq(app) == []
    info = await app.redis.xpending(STREAM, keys.CONSUMER_GROUP)
    assert info["pending"] == 0
    assert await waiting_for_peers(app.redis) == {}


async def test_ready_and_diagnose_say_since_when_delivery_waits_for_telegram(
    cron_only: ServedApp, embedded_redis_url: str,
) -> None:
    """The issue's "the status stayed green": nothing told that notifications were stuck.
    While Telegram answers sendMessage with 502 (its getMe still answers, so `/ready` is 200),
    `/ready` must carry `waiting: {telegram: {since, entries}}` and `diagnose` a `warn` line
    "waiting for Telegram since …"; once Telegram answers, the mail goes out and the field is
    gone."""
    app = cron_only
    started = int(time.time())
    await app.emulator.fail(token=app.token, method="sendMessage", error_code=502)
    async with _worker(embedded_redis_url):
        entry = await _notify(app, "waiting for Telegram")

        async def ready_says_waiting() -> bool:
            ready = await app.client.get("/ready")
            return ready.status_code == 200 and "waiting" in ready.json()

        await eventually(ready_says_waiting, "/ready saying it waits for Telegram", 10)
        waiting = (await app.client.get("/ready")).json()["waiting"]
        assert set(waiting) == {"telegram"} and waiting["telegram"]["entries"] == 1
        assert started <= waiting["telegram"]["since"] <= time.time()

        checks = await run_checks(settings_for(embedded_redis_url))
        [line] = [c for c in checks if c.name == "delivery"]
        assert line.status == "warn", line
        assert line.detail.startswith("waiting for Telegram since "), line
        assert "1 entry" in line.detail and "retry_window_s" in line.remedy

        await app.emulator.clear_failures(app.token)

        async def ready_waits_no_more() -> bool:
            ready = await app.client.get("/ready")
            return ready.status_code == 200 and "waiting" not in ready.json()

        await eventually(ready_waits_no_more, "/ready no longer waiting", 10)
        record = await _record(app, entry)
        assert record is not None and record["state"] == "delivered"
    checks = await run_checks(settings_for(embedded_redis_url))
    assert [c.status for c in checks if c.name == "delivery"] == ["ok"]
    sent = await app.emulator.sent_messages(app.token, app.chat)
    assert [subject_of(m.text) for m in sent] == ["waiting for Telegram"]


async def test_a_permanent_refusal_is_still_dead_lettered_at_once(
    cron_only: ServedApp, embedded_redis_url: str,
) -> None:
    """Catches a window that swallows permanent failures: a 403 (the bot was blocked) must be
    dead-lettered on its first attempt, not wait for a peer that did answer, and must not hold
    the chat: the notification after it goes out right away."""
    app = cron_only
    await app.emulator.fail(token=app.token, method="sendMessage", error_code=403, times=1)
    async with _worker(embedded_redis_url):
        refused = await _notify(app, "refused")
        after = await _notify(app, "after the refusal")

        async def both_finished() -> bool:
            return None not in (await _record(app, refused), await _record(app, after))

        await eventually(both_finished, "both entries finished", 10)
    record = await _record(app, refused)
    assert record is not None and record["state"] == "dead_letter"
    assert record["failure_class"] == "permission" and record["attempts"] == 1
    [row] = await _dlq(app)
    assert row["attempts"] == 1 and str(row["reason"]).startswith("telegram 403")
    sent = await app.emulator.sent_messages(app.token, app.chat)
    assert [subject_of(m.text) for m in sent] == ["after the refusal"]
    assert await waiting_for_peers(app.redis) == {}


async def test_an_entry_whose_retry_window_is_over_is_dead_lettered(
    cron_only: ServedApp, embedded_redis_url: str,
) -> None:
    """Catches a window that never ends, and one that `max_retries` still cuts short: with
    `retry_window_s` = 4 and Telegram answering 502 throughout, the entry is retried past the
    old `max_retries` + 1 attempts and dead-lettered once 4 s have passed since its first
    failure (the last attempt at the window's end), not before; nothing is left waiting."""
    app = cron_only
    await app.configure(retry_window_s=4)
    await app.emulator.fail(token=app.token, method="sendMessage", error_code=502)
    async with _worker(embedded_redis_url):
        entry = await _notify(app, "too late")

        async def dead() -> bool:
            return await _record(app, entry) is not None

        await eventually(dead, "the entry dead-lettered", 20)
    record = await _record(app, entry)
    assert record is not None and record["state"] == "dead_letter", record
    assert record["failure_class"] == "transient"
    assert record["attempts"] > MAX_ATTEMPTS  # the window decided, not max_retries
    [row] = await _dlq(app)
    assert str(row["reason"]).startswith("telegram 502")
    enqueued_s = int(entry.split("-")[0]) / 1000
    assert int(row["failed_at"]) - enqueued_s >= 3  # 4 s window, failed_at in whole seconds
    assert await app.emulator.sent_messages(app.token, app.chat) == []
    assert await waiting_for_peers(app.redis) == {}
    assert await app.redis.exists(keys.retry_window(STREAM, entry)) == 0


async def test_a_restart_while_telegram_is_down_keeps_the_chat_in_order(
    cron_only: ServedApp, embedded_redis_url: str,
) -> None:
    """Catches the order lost across a restart (a home server rebooted during the outage):
    the next worker left out the stopped one's waiting entry (its backoff not over yet) but
    took the entries behind it at once, and read new mail before either, so when Telegram was
    back the later notifications went first. The first worker stops (as on SIGTERM) while the
    chat's first notification waits for Telegram (its next try 3 s away) and two wait behind
    it; a fourth mail comes in; Telegram answers again and a second worker starts at once: all
    four arrive once, in order."""
    app = cron_only
    await app.emulator.fail(token=app.token, method="sendMessage", close=True)
    subjects = [f"reboot {n}" for n in range(4)]
    slow = WorkerOptions(backoff_base_s=3.0, backoff_cap_s=3.0)
    async with _worker(embedded_redis_url, slow):
        entries = [await _notify(app, subject) for subject in subjects[:3]]

        async def waiting_for_telegram() -> bool:
            return set(await waiting_for_peers(app.redis)) == {"telegram"}

        await eventually(waiting_for_telegram, "the worker waiting for Telegram", 20)
    # The first worker is stopped: its waiting entry is due again in about 3 s, those behind
    # it (they gave their leases back) at once.
    assert await app.redis.zscore(keys.retry_due(STREAM), entries[0]) > time.time() * 1000
    entries.append(await _notify(app, subjects[3]))
    await app.emulator.clear_failures(app.token)
    async with _worker(embedded_redis_url):

        async def all_delivered() -> bool:
            records = [await _record(app, e) for e in entries]
            return all(r is not None and r["state"] == "delivered" for r in records)

        await eventually(all_delivered, "every entry delivered", 20)
    sent = await app.emulator.sent_messages(app.token, app.chat)
    assert [subject_of(m.text) for m in sent] == subjects
