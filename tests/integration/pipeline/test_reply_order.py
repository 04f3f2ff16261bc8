"""A chat's replies are worked out in the chat's order, not only sent in it."""

from __future__ import annotations

import asyncio
import time

from messageweave.pipeline.worker import Worker
from messageweave.store import consent, keys
from tests.helpers import LaneTurn, llm_wire, worker_services
from tests.peers.fakellm import FakeLlm, fakellm_server
from tests.served import ServedApp

__all__ = ["fakellm_server"]  # the fixture

HINT = "授权已到期或尚未授权；如需 AI 摘要，请重新选择授权期限。"


async def test_a_summary_asked_right_after_a_revoke_never_reaches_the_model(
    cron_only: ServedApp, embedded_redis_url: str, fakellm_server: FakeLlm,
) -> None:
    """Catches replies computed before the chat lane's turn: the worker worked out "/summary"
    while the "/ai off" before it was still in flight, so a summary asked right after a
    revoke went to the model with the mail's text (and a grant right before a summary was
    ignored). Here the summary's entry waits for its turn while the revoke lands; it must
    answer with the consent hint and send nothing to the model."""
    await cron_only.configure(**llm_wire(fakellm_server))
    email_id = cron_only.append("Quarterly numbers", body="Revenue is up 12 percent.")
    await consent.grant(cron_only.redis, keys.DEFAULT, cron_only.chat, 3600, int(time.time()))
    before = await fakellm_server.total_requests()
    async with worker_services(embedded_redis_url) as svc:
        worker = Worker(svc)
        await worker.streams.ensure_groups()
        await worker.beat()
        await cron_only.redis.xadd(keys.STREAM_TELEGRAM, {
            "update_id": "1", "chat_id": str(cron_only.chat), "text": f"/summary {email_id}"})
        [entry] = await worker.streams.read_new(worker.consumer, 1, None)
        turn = LaneTurn()  # the "/ai off" before it has not been sent yet
        attempt = asyncio.create_task(worker.process(entry, turn))
        await asyncio.wait_for(turn.waited_for.wait(), 10)
        # what "/ai off" did meanwhile
        await consent.revoke(cron_only.redis, keys.DEFAULT, cron_only.chat)
        turn.set_result(None)
        assert await asyncio.wait_for(attempt, 20) == "delivered"
    [reply] = await cron_only.replies(1)
    assert reply.endswith(HINT), reply
    assert await fakellm_server.total_requests() == before
