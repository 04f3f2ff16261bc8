"""A configuration written through one instance is live on every instance within 1 s."""

import asyncio
import time

import redis.asyncio as aioredis

from messageweave.store import keys
from tests.helpers import admin_headers, running_client, sample_wire, settings_for


async def test_write_on_one_instance_is_live_on_another_within_a_second(
    embedded_redis_url: str, redis_client: aioredis.Redis
) -> None:
    settings = settings_for(embedded_redis_url)
    async with running_client(settings) as a, running_client(settings) as b:
        session = (await a.post("/api/admin/session", headers=admin_headers())).json()["session"]
        auth = {"Authorization": f"Bearer {session}"}
        assert (await a.put("/api/business-config", json=sample_wire(), headers=auth)).status_code \
            == 200
        old_worker = {"Authorization": "Bearer worker-token-SECRET"}
        new_worker = {"Authorization": "Bearer worker-token-ROTATED"}
        await _until_status(b, old_worker, 200, 1.0, redis_client)

        response = await a.put("/api/business-config", headers=auth,
                               json={"worker_token": "worker-token-ROTATED"})
        assert response.status_code == 200
        written = time.monotonic()
        await _until_status(b, new_worker, 200, 1.0, redis_client)
        assert time.monotonic() - written < 1.0
        assert (await b.get("/api/enabled", headers=old_worker)).status_code == 401


async def _until_status(client, headers, status, deadline_s, redis):  # type: ignore[no-untyped-def]
    end = time.monotonic() + deadline_s
    while True:
        response = await client.get("/api/enabled", headers=headers)
        if response.status_code == status:
            return
        # The poll's own refused tokens must not lock the test client out (reference §3.4).
        await redis.delete(keys.throttle_failures("127.0.0.1"))  # httpx's ASGI client address
        assert time.monotonic() < end, f"still {response.status_code} after {deadline_s}s"
        await asyncio.sleep(0.02)
