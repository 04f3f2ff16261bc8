"""Issue #23 (8): what the public status tells, and the Redis of `compose.yaml` (the compose file
is checked in tests/unit/test_container_files.py)."""

from __future__ import annotations

from importlib.metadata import version

import httpx
import redis.asyncio as aioredis

from messageweave.settings import Settings
from messageweave.store import keys
from messageweave.version import build_version
from tests.helpers import ADMIN_KEY, admin_headers, login, running_client

RELEASE = version("messageweave")  # pyproject.toml's version, as installed


async def test_the_public_status_shows_the_version_number_only(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    """Finding 8 (issue #23): the public `/api/status` gave the exact commit and build time
    (`<sha>+<UTC time>`), which tells an attacker which fixes the instance lacks. Without an
    admin session it says the release only; with one, the full build string. No other
    credential (the admin key itself, a wrong token) shows more, and a wrong one counts
    against the client like on every other Bearer route."""
    assert "+" not in RELEASE
    assert "+" in build_version()
    assert (await client.get("/api/status")).json()["version"] == RELEASE
    assert (await client.get("/api/status", headers=admin_headers())).json()["version"] \
        == RELEASE
    wrong = await client.get("/api/status", headers={"Authorization": "Bearer guess"})
    assert wrong.status_code == 200 and wrong.json()["version"] == RELEASE
    assert await redis_client.get(keys.throttle_failures("127.0.0.1")) == "1"
    admin = await login(client)
    assert (await client.get("/api/status", headers=admin)).json()["version"] == build_version()


async def test_a_locked_client_sees_the_version_number_only_even_with_a_session(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    """Finding 8 (issue #23): the session check on a public route must not become a way
    around the throttle: while the client is locked, even a valid session shows no more (and
    the route still answers 200: it is public)."""
    admin = await login(client)
    await redis_client.set(keys.throttle_lock("127.0.0.1"), 60, ex=60)
    status = await client.get("/api/status", headers=admin)
    assert status.status_code == 200 and status.json()["version"] == RELEASE


async def test_setup_mode_shows_the_version_number_only() -> None:
    """Finding 8 (issue #23): setup mode (nothing configured, no session possible) is public
    too."""
    settings = Settings(redis_url="", admin_key="short")
    async with running_client(settings) as setup:
        body = (await setup.get("/api/status",
                                headers={"Authorization": f"Bearer {ADMIN_KEY}"})).json()
    assert body["version"] == RELEASE
