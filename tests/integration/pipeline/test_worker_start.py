"""A worker started on an empty Redis (a fresh install, or after the streams were deleted)."""

from __future__ import annotations

import asyncio
import logging

import pytest
import redis.asyncio as aioredis

from messageweave import runtime
from messageweave.aio import cancel
from messageweave.pipeline.worker import Worker
from tests.helpers import eventually, settings_for

FAILED = "worker maintenance failed"


async def test_the_first_maintenance_pass_on_an_empty_redis_logs_no_failure(
    embedded_redis_url: str, redis_client: aioredis.Redis, caplog: pytest.LogCaptureFixture,
) -> None:
    """Bug caught: on a Redis without the streams, the maintenance pass could run before the
    read loop had created the consumer group, and every start logged `worker maintenance
    failed: ResponseError` (NOGROUP) for nothing."""
    caplog.set_level(logging.WARNING, logger="messageweave.pipeline.worker")
    svc = runtime.build_services(settings_for(embedded_redis_url))
    worker = Worker(svc)
    task = asyncio.create_task(worker._maintenance_loop())
    async def ended() -> bool:
        return worker._passes >= 1 or FAILED in caplog.text
    try:
        await eventually(ended, "a maintenance pass ending", 10)
    finally:
        await cancel(task)
        await runtime.close(svc)
    assert FAILED not in caplog.text
    # the pass made the group itself
    assert await redis_client.xinfo_groups("a:{default}:stalwart:jmap")
