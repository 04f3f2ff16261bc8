"""A real delivery leaves its trace: a send-log record, moved metrics, and no secret in either."""

from __future__ import annotations

from tests.helpers import eventually
from tests.served import ServedApp

WORKER = {"Authorization": "Bearer worker-token-SECRET"}


def _delivered_total(metrics: str) -> float:
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith("messageweave_deliveries_total{") and 'outcome="delivered"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_a_delivery_is_logged_and_counted(pipeline: ServedApp) -> None:
    before = _delivered_total((await pipeline.client.get("/metrics", headers=WORKER)).text)
    email_id = pipeline.append("Trace me", sender="Ann Lee <ann@example.org>")
    entry = await pipeline.enqueue_mail(email_id)
    sent = await pipeline.emulator.wait_for_messages(pipeline.token, pipeline.chat, 1, 3.0)

    async def logged() -> bool:
        body = (await pipeline.client.get("/api/logs/send?outcome=delivered",
                                          headers=pipeline.admin)).json()
        return any(r.get("event_id") == entry for r in body["records"])

    await eventually(logged, "the send logged", 5)
    records = (await pipeline.client.get("/api/logs/send",
                                         headers=pipeline.admin)).json()["records"]
    [record] = [r for r in records if r.get("event_id") == entry]
    assert record["stream"] == "stalwart:jmap" and record["outcome"] == "delivered"
    assert record["message_ids"] == [sent[0].message_id]
    text = str(record)
    assert "Trace me" not in text and "Ann Lee" not in text  # no mail content in the log
    assert "SECRET" not in text

    metrics = (await pipeline.client.get("/metrics", headers=WORKER)).text
    assert _delivered_total(metrics) == before + 1


async def test_the_send_record_holds_the_telegram_call_latency(pipeline: ServedApp) -> None:
    """Issue #11: every send record said `latency_ms: 0.0`. The attempt's Telegram calls are
    timed now; the Bot API answers this one after 400 ms."""
    await pipeline.emulator.fail(token=pipeline.token, method="sendMessage", delay_ms=400,
                                 times=1)
    entry = await pipeline.enqueue_mail(pipeline.append("Timed"))

    async def record() -> dict[str, object] | None:
        body = (await pipeline.client.get("/api/logs/send?outcome=delivered",
                                          headers=pipeline.admin)).json()
        return next((r for r in body["records"] if r.get("event_id") == entry), None)

    async def logged() -> bool:
        return await record() is not None

    await eventually(logged, "the send logged", 10)
    found = await record()
    assert found is not None
    latency = float(found["latency_ms"])  # type: ignore[arg-type]
    assert 400 <= latency < 10_000, latency
