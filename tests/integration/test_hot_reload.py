"""A configuration written through one instance is live on every instance within 1 s."""

import time

import httpx
import redis.asyncio as aioredis

from messageweave.store import keys
from tests.helpers import admin_headers, eventually, running_client, sample_wire, settings_for


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


async def _until_status(client: httpx.AsyncClient, headers: dict[str, str], status: int,
                        deadline_s: float, redis: aioredis.Redis) -> None:
    seen: list[int] = []

    async def answered() -> bool:
        response = await client.get("/api/enabled", headers=headers)
        seen[:] = [response.status_code]
        # The poll's own refused tokens must not lock the test client out (reference §3.4).
        await redis.delete(keys.throttle_failures("127.0.0.1"))  # httpx's ASGI client address
        return response.status_code == status
    await eventually(answered, lambda: f"/api/enabled answering {status} (still {seen})",
                     deadline_s)
