"""Fixtures for the operations tests: the app with the debug surface on, peers wired in."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import redis.asyncio as aioredis

from tests.helpers import DEBUG_TOKEN, running_client, settings_for


@pytest.fixture
async def debug_client(
    embedded_redis_url: str, redis_client: aioredis.Redis
) -> AsyncIterator[httpx.AsyncClient]:
    settings = settings_for(embedded_redis_url, debug_requested=True, debug_token=DEBUG_TOKEN)
    async with running_client(settings) as c:
        yield c
