"""The debug surface exists only when requested (flag or DEBUG_ENABLED) and DEBUG_TOKEN is set."""

from __future__ import annotations

import itertools

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.settings import from_env
from tests.helpers import ADMIN_KEY, DEBUG_TOKEN, assert_envelope, debug_headers, running_client

ENV_VALUES = [None, "1", "true", "TRUE", "True", "yes", "YES", "0", "on", "false", "Yes "]
TRUTHY = {"1", "true", "TRUE", "True", "yes", "YES"}
CASES = list(itertools.product([False, True], ENV_VALUES, ["", DEBUG_TOKEN]))


@pytest.mark.parametrize(("flag", "env_value", "token"), CASES)
async def test_debug_routes_are_mounted_only_when_requested_and_a_token_is_set(
    embedded_redis_url: str, redis_client: aioredis.Redis,
    flag: bool, env_value: str | None, token: str,
) -> None:
    env = {"REDIS_URL": embedded_redis_url, "CONFIG_ENCRYPTION_KEY": ADMIN_KEY,
           "DEBUG_TOKEN": token}
    if env_value is not None:
        env["DEBUG_ENABLED"] = env_value
    mounted = (flag or env_value in TRUTHY) and bool(token)
    async with running_client(from_env(env, debug_flag=flag)) as client:
        response = await client.get("/debug/ping", headers=debug_headers())
        if mounted:
            assert response.status_code == 200 and response.json() == {"ok": True}
        else:
            assert_envelope(response, 404, "not_found")
            assert_envelope(await client.post("/debug/notify", headers=debug_headers()),
                            404, "not_found")


@pytest.mark.parametrize("header", [
    None, f"Bearer {DEBUG_TOKEN}x", f"bearer {DEBUG_TOKEN}", DEBUG_TOKEN, f"Bearer {ADMIN_KEY}",
])
@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/debug/ping"), ("GET", "/debug/config"), ("GET", "/debug/redis"),
    ("GET", "/debug/jmap"), ("GET", "/debug/telegram"), ("GET", "/debug/worker"),
    ("POST", "/debug/notify"),
])
async def test_every_debug_route_refuses_anything_but_the_debug_token(
    debug_client: httpx.AsyncClient, header: str | None, method: str, path: str,
) -> None:
    headers = {} if header is None else {"Authorization": header}
    assert_envelope(await debug_client.request(method, path, headers=headers), 401,
                    "unauthorized")
