"""The in-place upgrade of issue #35 (`messageweave.store.upgrade`, reference §1.11) on the
start path: a Redis that cannot be reached when the service starts."""

from __future__ import annotations

import subprocess
from pathlib import Path

import redis.asyncio as aioredis

from messageweave.store import keys
from messageweave.store.upgrade import SCHEMA_VERSION
from tests.helpers import assert_envelope, eventually, free_port, running_client, settings_for
from tests.peers.redis7 import start_debian_redis

# The backoff of `upgrade_when_reachable` doubles up to 30 s; Redis comes back before its
# third try, which is due within 3.5 s of the start.
BACK_WITHIN_S = 10.0


def _old_release_dump(data: Path) -> Path:
    """A dump holding a key as the release before issue #35 named it (`config:enabled`)."""
    proc, url = start_debian_redis(data)
    try:
        import redis as sync_redis
        client = sync_redis.Redis.from_url(url)
        client.set("config:enabled", "1")
        client.save()
        client.close()
    finally:
        proc.terminate()
        proc.wait(10)
    return data / "dump.rdb"


async def test_a_start_with_redis_down_serves_healthz_then_upgrades_when_redis_is_back(
    tmp_path: Path,
) -> None:
    """Catches the upgrade on the start path failing the start when Redis is down (the service
    exits instead of answering `/healthz`, and `KeptRedis`'s restart finds no service), or never
    running once Redis is back (the loops then read the new names of an old Redis: every
    queued mail and the kill switch lost)."""
    (tmp_path / "old").mkdir()
    (tmp_path / "back").mkdir()
    dump = _old_release_dump(tmp_path / "old")
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    proc: subprocess.Popen[bytes] | None = None
    async with running_client(settings_for(url)) as client:
        try:
            assert (await client.get("/healthz")).status_code == 200
            assert_envelope(await client.get("/ready"), 503, "service_unavailable")
            proc, _ = start_debian_redis(tmp_path / "back", port=port, rdb=dump)
            redis = aioredis.Redis.from_url(url, decode_responses=True)

            async def upgraded() -> bool:
                return bool(await redis.get(SCHEMA_VERSION) == "2")

            await eventually(upgraded, "the upgrade once Redis is back", BACK_WITHIN_S)
            assert await redis.get(keys.ENABLED) == "1"
            assert not await redis.exists("config:enabled")

            async def worker_ran() -> bool:
                return bool(await redis.exists(keys.STREAM_JMAP))

            await eventually(worker_ran, "the worker's loop, after the upgrade", BACK_WITHIN_S)
            assert (await client.get("/healthz")).status_code == 200
            await redis.aclose()
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(10)
