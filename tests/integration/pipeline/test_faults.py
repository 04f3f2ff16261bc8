"""Faults that must lose nothing: Telegram throttling and refusals, killed workers, a Redis
restart, two instances on one Redis. Real processes and peers throughout."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from messageweave.store import keys
from messageweave.store.redis import EmbeddedRedis
from messageweave.store.redis_url import is_cluster
from tests.helpers import (
    ADMIN_KEY,
    configure,
    console_script,
    enqueue_mails,
    eventually,
    every_entry_finished,
    running_client,
    settings_for,
    subject_of,
)
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator
from tests.served import ServedApp, lift_limits, peer_wire


async def _dlq(pipeline: ServedApp) -> list[dict[str, object]]:
    body = (await pipeline.client.get("/api/dlq", headers=pipeline.admin)).json()
    entries: list[dict[str, object]] = body["entries"]
    return entries


async def test_429_pauses_the_lane_and_keeps_order_without_dropping(pipeline: ServedApp) -> None:
    await pipeline.emulator.fail(token=pipeline.token, method="sendMessage", error_code=429,
                                 retry_after=1, skip=1, times=1)
    ids = [pipeline.append(f"ordered {n}") for n in range(5)]
    started = time.monotonic()
    for email_id in ids:
        await pipeline.enqueue_mail(email_id)
    sent = await pipeline.emulator.wait_for_messages(pipeline.token, pipeline.chat, 5, 8.0)
    assert [subject_of(m.text) for m in sent] == [f"ordered {n}" for n in range(5)]
    assert time.monotonic() - started >= 1.0  # the lane waited for retry_after
    assert await _dlq(pipeline) == []


@pytest.mark.parametrize(("code", "failure_class"), [(400, "not_found"), (403, "permission")])
async def test_telegram_refusal_goes_to_the_dlq_at_once_without_retry(
    pipeline: ServedApp, code: int, failure_class: str,
) -> None:
    await pipeline.emulator.fail(token=pipeline.token, method="sendMessage", error_code=code)
    await pipeline.enqueue_mail(pipeline.append(f"refused {code}"))

    async def dead() -> bool:
        return len(await _dlq(pipeline)) == 1

    await eventually(dead, "the entry dead-lettered", 5)
    [row] = await _dlq(pipeline)
    assert row["failure_class"] == failure_class and row["attempts"] == 1
    assert str(row["reason"]).startswith(f"telegram {code}: ")
    # No retry follows: a retry keeps the entry pending with a due time (`retry_due`), and the
    # dead letter acked it in the same script, so nothing is left that could send it again.
    info = await pipeline.redis.xpending(keys.STREAM_JMAP, keys.CONSUMER_GROUP)
    assert info["pending"] == 0
    assert await pipeline.redis.zcard(keys.retry_due(keys.STREAM_JMAP)) == 0
    assert len(await _dlq(pipeline)) == 1


async def test_a_transient_telegram_error_is_retried_within_seconds(pipeline: ServedApp) -> None:
    await pipeline.emulator.fail(token=pipeline.token, method="sendMessage", error_code=500,
                                 times=1)
    await pipeline.enqueue_mail(pipeline.append("flaky"))
    sent = await pipeline.emulator.wait_for_messages(pipeline.token, pipeline.chat, 1, 6.0)
    assert [subject_of(m.text) for m in sent] == ["flaky"]
    assert await _dlq(pipeline) == []


async def test_retries_end_in_the_dlq_after_max_attempts(pipeline: ServedApp) -> None:
    """With `retry_window_s` 0 (issue #22: the old behaviour), a 5xx counts against
    `max_retries` like any retryable failure: two attempts, then the DLQ."""
    await pipeline.configure(retry_window_s=0)
    saved = await pipeline.client.put("/api/config", headers=pipeline.admin, json={
        "jmap_timeout_ms": 15000, "telegram_timeout_ms": 10000, "llm_timeout_ms": 30000,
        "max_retries": 1})
    assert saved.status_code == 200, saved.text
    await pipeline.emulator.fail(token=pipeline.token, method="sendMessage", error_code=502)
    await pipeline.enqueue_mail(pipeline.append("always failing"))

    async def dead() -> bool:
        return len(await _dlq(pipeline)) == 1

    await eventually(dead, "the entry dead-lettered", 8)
    [row] = await _dlq(pipeline)
    assert row["failure_class"] == "transient" and row["attempts"] == 2


# --- real processes ----------------------------------------------------------------------


@pytest.fixture
async def configured_redis(
    embedded_redis_url: str, redis_client: aioredis.Redis, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> AsyncIterator[dict[str, object]]:
    """A configuration stored in the embedded Redis, with no app (and no worker) left running."""
    wire = peer_wire(cyrus, telegram_emulator)
    async with running_client(settings_for(embedded_redis_url)) as client:
        await configure(client, wire, applied=True)
    await lift_limits(redis_client)
    yield wire


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _worker_process(redis_url: str, cyrus: CyrusServer, *,
                    sigint_ignored: bool = False) -> subprocess.Popen[bytes]:
    """`messageweave drain --loop`. `sigint_ignored` starts it the way a non-interactive shell
    starts a background job: with SIGINT inherited as ignored."""
    env = {**os.environ, "REDIS_URL": redis_url, "CONFIG_ENCRYPTION_KEY": ADMIN_KEY,
           "SSL_CERT_FILE": str(cyrus.ca_file)}
    return subprocess.Popen([console_script("messageweave"), "drain", "--loop"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=_ignore_sigint if sigint_ignored else None)


async def test_kill_9_during_200_notifications_loses_nothing(
    configured_redis: dict[str, object], embedded_redis_url: str, redis_client: aioredis.Redis,
    cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
) -> None:
    token, chat = str(configured_redis["bot_token"]), int(configured_redis["telegram_chat_id"])
    # Each send answers after 20 ms, so a kill lands mid-send now and then.
    await telegram_emulator.fail(token=token, method="sendMessage", delay_ms=20)
    by_subject = await enqueue_mails(redis_client, cyrus, "kill", 200)
    kills = 0
    proc = _worker_process(embedded_redis_url, cyrus)
    try:
        for _ in range(3):
            await telegram_emulator.wait_for_messages(token, chat, 30 * (kills + 1), 20.0)
            await asyncio.sleep(random.uniform(0.0, 0.3))
            proc.send_signal(signal.SIGKILL)
            proc.wait(5)
            kills += 1
            proc = _worker_process(embedded_redis_url, cyrus)
        restarted = time.monotonic()
        sent = await telegram_emulator.wait_for_messages(token, chat, 200, 30.0, unique=True)
        subjects = Counter(subject_of(m.text) for m in sent)
        assert set(subjects) == set(by_subject), "every mail is delivered"
        assert time.monotonic() - restarted < 30
        await every_entry_finished(redis_client)  # a resend in flight has landed too
        sent = await telegram_emulator.sent_messages(token, chat)
        subjects = Counter(subject_of(m.text) for m in sent)
        duplicates = {s for s, n in subjects.items() if n > 1}
        assert sum(subjects.values()) - len(subjects) <= kills
        unknown = await redis_client.zrange(keys.DELIVERY_UNKNOWN, 0, -1)
        for subject in duplicates:
            assert f"{keys.STREAM_JMAP}/{by_subject[subject]}/resent" in unknown
    finally:
        proc.kill()
        proc.wait(5)
        await telegram_emulator.clear_failures(token)


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
async def test_sigterm_hands_pending_work_over_at_once(
    configured_redis: dict[str, object], embedded_redis_url: str, redis_client: aioredis.Redis,
    cyrus: CyrusServer, telegram_emulator: TelegramEmulator, stop: signal.Signals,
) -> None:
    """A stopped worker releases its entries and drops its heartbeat, so the next one takes
    over at once. Issue #11: this failed whenever the suite ran as a background job (a
    non-interactive shell's `cmd &`): the worker inherited SIGINT as ignored, Python and asyncio
    then install no Ctrl-C handling, and the SIGINT was lost; the worker never exited. The
    first worker is started that way on purpose, whatever started the suite."""
    token, chat = str(configured_redis["bot_token"]), int(configured_redis["telegram_chat_id"])
    await redis_client.hset(keys.GOVERNOR_LIMITS, "chat_per_s", 20)
    await enqueue_mails(redis_client, cyrus, "term", 40)
    first = _worker_process(embedded_redis_url, cyrus, sigint_ignored=True)
    second = None
    try:
        early = await telegram_emulator.wait_for_messages(token, chat, 5, 20.0)
        assert len(early) >= 5, "the first worker did not start delivering"
        first.send_signal(stop)
        first.wait(30)
        handed_over = len({m.text for m in await telegram_emulator.sent_messages(token, chat)})
        started = time.monotonic()
        second = _worker_process(embedded_redis_url, cyrus)
        assert handed_over < 40, "the first worker finished before the signal: nothing to hand over"
        await telegram_emulator.wait_for_messages(token, chat, handed_over + 1, 30.0, unique=True)
        # The second worker took over without waiting out the first one's 15 s heartbeat.
        assert time.monotonic() - started < 12
        sent = await telegram_emulator.wait_for_messages(token, chat, 40, 60.0, unique=True)
        assert len({subject_of(m.text) for m in sent}) == 40
    finally:
        for p in (first, second):
            if p is not None:
                p.kill()
                p.wait(5)


async def test_redis_restart_mid_run_loses_nothing(
    cyrus: CyrusServer, telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> None:
    data = Path(tempfile.mkdtemp(prefix="mwr", dir="/tmp"))
    server = EmbeddedRedis(data)
    url = server.start()
    assert url.startswith("unix://")  # the same address after the restart
    wire = peer_wire(cyrus, telegram_emulator)
    token, chat = str(wire["bot_token"]), int(wire["telegram_chat_id"])
    redis = aioredis.from_url(url, decode_responses=True)
    try:
        async with running_client(settings_for(url)) as client:
            await configure(client, wire, applied=True)
            await redis.hset(keys.GOVERNOR_LIMITS, mapping={"bot_per_s": 0, "chat_per_s": 10})
            by_subject = await enqueue_mails(redis, cyrus, "restart", 30)
            await telegram_emulator.wait_for_messages(token, chat, 5, 10.0)
            server.stop()
            await asyncio.sleep(1.0)
            server.start()
            sent = await telegram_emulator.wait_for_messages(token, chat, 30, 30.0, unique=True)
            subjects = Counter(subject_of(m.text) for m in sent)
            assert set(subjects) == set(by_subject)
            unknown = await redis.zrange(keys.DELIVERY_UNKNOWN, 0, -1)
            for subject, n in subjects.items():
                if n > 1:
                    assert f"{keys.STREAM_JMAP}/{by_subject[subject]}/resent" in unknown
    finally:
        await redis.aclose()
        server.stop()
        shutil.rmtree(data, ignore_errors=True)


async def test_two_instances_deliver_each_event_once(
    configured_redis: dict[str, object], embedded_redis_url: str, redis_client: aioredis.Redis,
    cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
) -> None:
    token, chat = str(configured_redis["bot_token"]), int(configured_redis["telegram_chat_id"])
    settings = settings_for(embedded_redis_url)
    async with running_client(settings), running_client(settings):
        by_subject = await enqueue_mails(redis_client, cyrus, "twice", 100)
        sent = await telegram_emulator.wait_for_messages(token, chat, 100, 20.0)
        await every_entry_finished(redis_client)  # a second send in flight has landed too
        sent = await telegram_emulator.sent_messages(token, chat)
        assert sorted(subject_of(m.text) for m in sent) == sorted(by_subject)
        consumers = await redis_client.xinfo_consumers(keys.STREAM_JMAP, keys.CONSUMER_GROUP)
        # Both read the mail stream. Redis 7 makes a consumer only once it is served an entry,
        # and on a cluster an idle worker waits on one slot's stream at a time (§7.18): there
        # the first worker may take the whole burst while the other waits on the chat's.
        assert len(consumers) == 2 or (is_cluster(redis_client) and len(consumers) == 1)
