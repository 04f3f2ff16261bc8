"""The ledger's fences against stale attempts (issue #24: mutants a mutation audit put
back by hand survived the suite). Driven against the real Redis, Cyrus and the Bot API
emulator: `cron_only` runs no worker of its own, so every send comes from a `Worker` the test
drives."""

from __future__ import annotations

import json

from messageweave.pipeline.ledger import LeaseLost, Ledger, SendProgress
from messageweave.pipeline.worker import Worker
from messageweave.store import keys
from tests.helpers import worker_services
from tests.served import ServedApp


async def test_a_stale_copy_of_a_delivered_entry_is_not_sent_again(
    cron_only: ServedApp, embedded_redis_url: str,
) -> None:
    """Catches: `BEGIN` not skipping an entry that already has its terminal record (a
    delivered one), so a stale copy read again (a consumer group moved back, a claim of an
    entry another worker finished) sends the notification a second time."""
    entry_id = await cron_only.enqueue_mail(cron_only.append("Delivered once"))
    async with worker_services(embedded_redis_url) as svc:
        worker = Worker(svc, consumer="fence-a")
        await worker.drain_once()
        sent = await cron_only.emulator.sent_messages(cron_only.token, cron_only.chat)
        assert len(sent) == 1
        record = await cron_only.redis.get(keys.delivery_committed(keys.STREAM_JMAP, entry_id))
        assert record is not None and json.loads(record)["state"] == "delivered"
        # The group forgets how far it read: the delivered entry is handed out again.
        await cron_only.redis.xgroup_setid(keys.STREAM_JMAP, keys.CONSUMER_GROUP, id="0")
        await Worker(svc, consumer="fence-b").drain_once()
    assert len(await cron_only.emulator.sent_messages(cron_only.token, cron_only.chat)) == 1
    info = await cron_only.redis.xpending(keys.STREAM_JMAP, keys.CONSUMER_GROUP)
    assert int(info["pending"]) == 0  # the stale copy was acked, not left pending


async def test_a_stale_copy_of_a_skipped_entry_is_not_sent_again(
    cron_only: ServedApp, embedded_redis_url: str,
) -> None:
    """Catches: `BEGIN` not skipping an entry whose terminal record is `skipped` (a mail a
    mute rule silenced), so a stale copy read again after the rule changed notifies a mail
    the owner had muted when it came."""
    await cron_only.configure(notify_rules=[
        {"name": "quiet", "subject": "Muted once", "action": "mute"}])
    entry_id = await cron_only.enqueue_mail(cron_only.append("Muted once"))
    async with worker_services(embedded_redis_url) as svc:
        await Worker(svc, consumer="fence-e").drain_once()
    record = await cron_only.redis.get(keys.delivery_committed(keys.STREAM_JMAP, entry_id))
    assert record is not None and json.loads(record)["state"] == "skipped"
    await cron_only.configure(notify_rules=[])  # the rule is gone: the mail itself would go
    await cron_only.redis.xgroup_setid(keys.STREAM_JMAP, keys.CONSUMER_GROUP, id="0")
    async with worker_services(embedded_redis_url) as svc:  # one that reads the new rules
        await Worker(svc, consumer="fence-f").drain_once()
    assert await cron_only.emulator.sent_messages(cron_only.token, cron_only.chat) == []
    info = await cron_only.redis.xpending(keys.STREAM_JMAP, keys.CONSUMER_GROUP)
    assert int(info["pending"]) == 0


async def _two_attempts(app: ServedApp, consumer_a: str, consumer_b: str
                        ) -> tuple[Ledger, Ledger, object, object, str]:
    """A read entry whose first attempt (A) lost its lease to a second one (B): A's lease ran
    out while A was paused, and B took it."""
    entry_id = await app.enqueue_mail(app.append("Held by another attempt"))
    await app.redis.xgroup_create(keys.STREAM_JMAP, keys.CONSUMER_GROUP, id="0",
                                  mkstream=True)
    await app.redis.xreadgroup(keys.CONSUMER_GROUP, consumer_a, {keys.STREAM_JMAP: ">"})
    a, b = Ledger(app.redis, consumer_a), Ledger(app.redis, consumer_b)
    begun_a = await a.begin(keys.STREAM_JMAP, entry_id)
    assert begun_a.state == "go" and begun_a.lease is not None
    await app.redis.delete(begun_a.lease.inflight_key)  # A's lease expired
    begun_b = await b.begin(keys.STREAM_JMAP, entry_id)
    assert begun_b.state == "go" and begun_b.lease is not None
    return a, b, begun_a.lease, begun_b.lease, entry_id


async def test_a_stale_attempt_cannot_dead_letter_an_entry_another_attempt_holds(
    cron_only: ServedApp,
) -> None:
    """Catches: the lease check left out of `RETRY_OR_DLQ`, so a stale attempt's permanent
    failure dead-letters (and acks) an entry that another attempt is delivering."""
    a, b, lease_a, lease_b, entry_id = await _two_attempts(cron_only, "stale-a", "live-b")
    outcome = await a.retry_or_dlq(
        lease_a, payload=json.dumps({"email_id": "x"}), failure_class="invalid_payload",
        reason="stale", max_attempts=1, permanent=True, delay_s=0)  # type: ignore[arg-type]
    assert outcome.fenced and not outcome.dead_lettered
    assert await cron_only.redis.xlen(keys.dlq(keys.STREAM_JMAP)) == 0
    assert await cron_only.redis.get(keys.delivery_committed(keys.STREAM_JMAP, entry_id)) is None
    assert await b.renew(lease_b)  # B still holds it  # type: ignore[arg-type]


async def test_a_stale_attempt_cannot_overwrite_the_live_holders_intent(
    cron_only: ServedApp,
) -> None:
    """Catches: the lease check left out of `MARK`, so a stale attempt's `failed` overwrites
    the live holder's `sending` intent, and under `at_most_once` a crash of the holder then
    reads as "not sent": the message goes out twice."""
    a, b, lease_a, lease_b, entry_id = await _two_attempts(cron_only, "stale-c", "live-d")
    await b.mark(lease_b, SendProgress(0, 1), "sending")  # type: ignore[arg-type]
    intent_key = keys.delivery_intent(keys.STREAM_JMAP, entry_id)
    before = await cron_only.redis.hgetall(intent_key)
    try:
        await a.mark(lease_a, SendProgress(0, 0), "failed")  # type: ignore[arg-type]
    except LeaseLost:
        pass
    else:
        raise AssertionError("a stale attempt wrote the intent")
    assert await cron_only.redis.hgetall(intent_key) == before
    assert before["state"] == "sending" and before["chunk"] == "1"
