"""`messageweave_events_ingested_total{source}` counts what enters the delivery streams: the mail
a reconcile pass enqueues (`reconcile`), the mail a push's catch-up enqueues (`jmap_push`) and
the updates the webhook queues (`telegram_webhook`). Real app, Redis and Cyrus."""

from __future__ import annotations

import httpx
import redis.asyncio as aioredis

from tests.helpers import (
    RECONCILE_AUTH,
    FreshUser,
    eventually,
    login,
    metric_value,
    sample_wire,
    state_change,
    wait_enqueued,
)
from tests.integration.mailbox.push_server import PUSH, register_for_test
from tests.peers.cyrus import CyrusServer

METRIC = "messageweave_events_ingested_total"
SECRET = {"X-Telegram-Bot-Api-Secret-Token": str(sample_wire()["telegram_webhook_secret"])}


async def _ingested(client: httpx.AsyncClient, session: dict[str, str], source: str) -> float:
    return metric_value((await client.get("/metrics", headers=session)).text, METRIC,
                        f'source="{source}"')


async def _eventually(client: httpx.AsyncClient, session: dict[str, str], source: str,
                      expected: float) -> None:
    """The count reaches `expected` (a push's pass counts once it ends, after its enqueue)."""
    got: list[float] = []

    async def counted() -> bool:
        got[:] = [await _ingested(client, session, source)]
        return got[0] == expected
    await eventually(counted, lambda: f"{source}: {got}, expected {expected}", 10)


async def test_every_accepted_event_is_counted_by_its_source(
    app: httpx.AsyncClient, cyrus: CyrusServer, mailbox: FreshUser, redis_client: aioredis.Redis,
) -> None:
    """Catches the counter that stayed at 0 whatever arrived (nothing ever fed it): an
    operator's ingest graph was flat while mail and messages flowed."""
    session = await login(app)
    before = {s: await _ingested(app, session, s)
              for s in ("reconcile", "jmap_push", "telegram_webhook")}
    assert (await app.post("/reconcile", headers=RECONCILE_AUTH)).status_code == 204  # the baseline
    cyrus.append(user=mailbox.user, subject="one")
    cyrus.append(user=mailbox.user, subject="two")
    assert (await app.post("/reconcile", headers=RECONCILE_AUTH)).status_code == 204
    await _eventually(app, session, "reconcile", before["reconcile"] + 2)

    await register_for_test(redis_client)
    pushed = cyrus.append(user=mailbox.user, subject="pushed")
    push = await app.post(PUSH, json=state_change(mailbox.client.account_id))
    assert push.status_code == 204
    await wait_enqueued(redis_client, pushed.email_id, within_s=10)
    await _eventually(app, session, "jmap_push", before["jmap_push"] + 1)

    for update_id in (900, 901, 900):  # the second 900 is Telegram redelivering it
        answer = await app.post("/webhook/tg", headers=SECRET, json={"update_id": update_id})
        assert answer.status_code == 204
    await _eventually(app, session, "telegram_webhook", before["telegram_webhook"] + 2)
    assert await _ingested(app, session, "reconcile") == before["reconcile"] + 2
