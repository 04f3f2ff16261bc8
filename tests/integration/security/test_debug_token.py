"""Issue #23, finding 4: `DEBUG_TOKEN` had no strength rule and no throttle, and it opens
`/debug/notify`, which sends any text from the owner's bot to an allowlisted chat."""

from __future__ import annotations

import json
import logging

import pytest
import redis.asyncio as aioredis

from messageweave.settings import from_env
from messageweave.store import keys
from tests.helpers import ADMIN_KEY, admin_headers, assert_envelope, running_client, settings_for

GOOD = "debug-token-of-the-issue-23-tests-0123"  # 38 characters
MIN_CHARS = 32  # reference §4


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize("token", ["tiny-token-7", "debug-token-SECRET", "x" * 31])
async def test_a_short_debug_token_keeps_the_debug_surface_off_and_says_why(
    embedded_redis_url: str, redis_client: aioredis.Redis, caplog: pytest.LogCaptureFixture,
    token: str,
) -> None:
    """Finding 4 (issue #23): any `DEBUG_TOKEN`, one character included, mounted `/debug/*`.
    Below 32 characters the surface stays off (404, like no token) and a log line says why,
    without the token."""
    caplog.set_level(logging.INFO)
    env = {"REDIS_URL": embedded_redis_url, "CONFIG_ENCRYPTION_KEY": ADMIN_KEY,
           "DEBUG_ENABLED": "1", "DEBUG_TOKEN": token}
    async with running_client(from_env(env)) as client:
        for method, path in (("GET", "/debug/ping"), ("POST", "/debug/notify")):
            response = await client.request(method, path, headers=bearer(token))
            assert_envelope(response, 404, "not_found")
    why = [r.getMessage() for r in caplog.records if "DEBUG_TOKEN" in r.getMessage()]
    assert why and all(str(MIN_CHARS) in line for line in why), why
    assert token not in caplog.text.replace("DEBUG_TOKEN", "")


async def test_a_debug_token_of_32_characters_opens_the_debug_surface(
    embedded_redis_url: str, redis_client: aioredis.Redis,
) -> None:
    """Finding 4 (issue #23), the other side of the rule: 32 characters are enough."""
    token = "y" * MIN_CHARS
    assert from_env({"DEBUG_ENABLED": "1", "DEBUG_TOKEN": token}).debug_enabled
    async with running_client(settings_for(embedded_redis_url, debug_requested=True,
                                           debug_token=token)) as client:
        assert (await client.get("/debug/ping", headers=bearer(token))).status_code == 200


async def test_wrong_debug_tokens_are_throttled_like_every_credential(
    embedded_redis_url: str, redis_client: aioredis.Redis,
) -> None:
    """Finding 4 (issue #23): `/debug/*` took unlimited guesses of `DEBUG_TOKEN`. Failed
    guesses now count against the client's address like any other credential's: the
    `THROTTLE_MAX_FAILURES`th locks it out of every Bearer route, `/debug/notify` and the right
    token included, and the lock is audited."""
    settings = settings_for(embedded_redis_url, debug_requested=True, debug_token=GOOD)
    async with running_client(settings) as client:
        for _ in range(keys.THROTTLE_MAX_FAILURES):
            response = await client.post("/debug/notify", headers=bearer(GOOD + "x"))
            assert_envelope(response, 401, "unauthorized")
        for method, path, token in (("GET", "/debug/ping", GOOD), ("POST", "/debug/notify", GOOD),
                                    ("POST", "/api/admin/session", ADMIN_KEY)):
            locked = await client.request(method, path, headers=bearer(token))
            assert_envelope(locked, 429, "rate_limited")
            assert int(locked.headers["retry-after"]) > 0
        assert await redis_client.exists(keys.throttle_lock("127.0.0.1"))
        audit = [json.loads(f["r"]) for _id, f in await redis_client.xrange(keys.AUDIT_LOG)]
        assert [(a["action"], a["path"]) for a in audit if a["action"] == "auth_throttled"] == [
            ("auth_throttled", "/debug/notify")]
    # a request with no credential at all guessed nothing and is not counted
    await redis_client.delete(keys.throttle_lock("127.0.0.1"))
    async with running_client(settings) as client:
        for _ in range(2 * keys.THROTTLE_MAX_FAILURES):
            assert_envelope(await client.get("/debug/ping"), 401, "unauthorized")
        assert (await client.get("/debug/ping", headers=bearer(GOOD))).status_code == 200
        assert (await client.post("/api/admin/session", headers=admin_headers())
                ).status_code == 200
