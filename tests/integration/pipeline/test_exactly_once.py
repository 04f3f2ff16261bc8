"""Every delivery path at once on one Redis, and still each mail exactly once (issue #11)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter

import httpx
import pytest

from messageweave.aio import cancel
from messageweave.pipeline import recovery as recovery_module
from messageweave.pipeline import worker as worker_module
from messageweave.pipeline.worker import Worker
from messageweave.store import keys
from tests.helpers import (
    CYRUS_USER,
    enqueue_mail,
    eventually,
    running_client,
    settings_for,
    subject_of,
    worker_services,
)
from tests.served import ServedApp

AUTH = {"Authorization": "Bearer worker-token-SECRET"}
MAILS = 100


async def _cron(client: httpx.AsyncClient, stop: asyncio.Event) -> int:
    """`POST /worker` every second until `stop`; returns how many drains answered 204."""
    drains = 0
    while not stop.is_set():
        response = await client.post("/worker", headers=AUTH, json={"batch": 10})
        assert response.status_code == 204, response.text
        drains += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)
    return drains


async def _burst(pipeline: ServedApp, count: int) -> dict[str, str]:
    """`count` mails in Cyrus first, then queued all at once; subject → stream entry id."""
    subjects = [f"burst {n:03d}" for n in range(count)]
    emails = [pipeline.append(subject) for subject in subjects]
    # The reconcile's own enqueue (a dedup claim per mail, then the XADD). A pass the app runs
    # by itself (the second instance's start) may find a mail in Cyrus and claim it first: then
    # its claim names the entry it queued, and that one is the mail's.
    for email_id in emails:
        await enqueue_mail(pipeline.redis, CYRUS_USER, email_id)
    claims = await pipeline.redis.mget([keys.dedup_jmap(CYRUS_USER, e) for e in emails])
    return {subject: str(entry) for subject, entry in zip(subjects, claims, strict=True)}


async def test_cron_beside_two_instances_delivers_every_mail_exactly_once(
    pipeline: ServedApp, embedded_redis_url: str,
) -> None:
    """Issue #11, bug 1: with a cron calling `POST /worker` beside the in-process worker, a
    burst of 50 mails produced a duplicate (the lease keyed by consumer name let both paths of
    one process in; a cron batch's unstarted entries were reclaimed as stalled). Here: two
    instances on one Redis, each with its continuous worker and a cron every second, 100 mails,
    some sends failing once so retries race through the due set. Every mail reaches the
    emulator once: none twice, none missing."""
    redis, emulator = pipeline.redis, pipeline.emulator
    # Each send takes 30 ms (the burst takes seconds to drain, the crons get their share);
    # three fail with a 500 and are retried: fewer than `max_attempts`, because a chat's lane
    # sends one at a time and one entry may meet all three.
    await emulator.fail(token=pipeline.token, method="sendMessage", error_code=500, skip=20,
                        times=3)
    await emulator.fail(token=pipeline.token, method="sendMessage", delay_ms=30)
    async with running_client(settings_for(embedded_redis_url)) as second:
        stop = asyncio.Event()
        crons = [asyncio.create_task(_cron(c, stop)) for c in (pipeline.client, second)]
        try:
            by_subject = await _burst(pipeline, MAILS)

            async def all_finished() -> bool:
                names = [keys.delivery_committed(keys.STREAM_JMAP, i)
                         for i in by_subject.values()]
                info = await redis.xpending(keys.STREAM_JMAP, keys.CONSUMER_GROUP)
                return bool(await redis.exists(*names) == MAILS and info["pending"] == 0)

            await eventually(all_finished, "every entry finished", 30)
        finally:
            stop.set()
            drains = await asyncio.gather(*crons)
    assert all(n >= 1 for n in drains)
    sent = await emulator.sent_messages(pipeline.token, pipeline.chat)
    counts = Counter(subject_of(m.text) for m in sent)
    assert set(counts) == set(by_subject), "missing: " + ", ".join(
        sorted(set(by_subject) - set(counts)))
    assert {s: n for s, n in counts.items() if n > 1} == {}, "delivered twice"
    for entry in by_subject.values():
        raw = await redis.get(keys.delivery_committed(keys.STREAM_JMAP, entry))
        assert raw is not None and '"state":"delivered"' in raw


async def test_a_cron_batch_waiting_its_turn_is_not_reclaimed_as_stalled(
    cron_only: ServedApp, embedded_redis_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue #11, bug 1 (the batch half): `drain_once` fetched a whole batch but marked an
    entry as active only when it reached it, so the maintenance pass of the same process
    reclaimed the rest as "stalled" and sent them, and the batch sent them again. Here the
    continuous worker runs beside a cron batch in one process (as in the app), sends take
    0.8 s, and the stalled threshold is cut to 100 ms so the pass looks at the batch at once."""
    monkeypatch.setattr(recovery_module, "OWN_IDLE_MS", 100)
    monkeypatch.setattr(worker_module, "MAINTENANCE_INTERVAL_S", 0.2)
    await cron_only.emulator.fail(token=cron_only.token, method="sendMessage", delay_ms=800)
    subjects = [f"batch {n}" for n in range(4)]
    for subject in subjects:
        await cron_only.enqueue_mail(cron_only.append(subject))
    async with worker_services(embedded_redis_url) as svc:
        worker = Worker(svc)
        await worker.streams.ensure_groups()
        drain = asyncio.create_task(worker.drain_once(10))

        async def fetched() -> bool:
            info = await cron_only.redis.xpending(keys.STREAM_JMAP, keys.CONSUMER_GROUP)
            return bool(info["pending"] == len(subjects))

        await eventually(fetched, "the mail fetched", 10)
        continuous = asyncio.create_task(worker.run())
        try:
            result = await asyncio.wait_for(drain, 30)
        finally:
            await cancel(continuous)
    assert result.outcomes == {"delivered": len(subjects)}
    sent = await cron_only.emulator.sent_messages(cron_only.token, cron_only.chat)
    assert [subject_of(m.text) for m in sent] == subjects
