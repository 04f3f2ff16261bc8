"""Issue #23, finding 2: an admin session was not bound to the admin key, and a stream entry
was answered without checking its chat against the allowlist again. Real Redis, the real app;
the stream tests also the real Cyrus and the Bot API emulator."""

from __future__ import annotations

import hashlib
import hmac

import httpx
import redis.asyncio as aioredis

from messageweave.store import keys
from tests.helpers import (
    ADMIN_KEY,
    admin_headers,
    assert_envelope,
    eventually,
    login,
    running_client,
    sample_wire,
    settings_for,
)
from tests.served import ServedApp

OTHER_KEY = "cd" * 32


async def test_a_session_written_into_redis_by_hand_is_refused(
    client: httpx.AsyncClient, redis_client: aioredis.Redis,
) -> None:
    """Finding 2 (issue #23): `config:admin_session` held a bare `sha256(token)`, so whoever
    could write Redis minted a session without the admin key (`SET config:admin_session
    <sha256("x")>`, then `PUT /api/business-config` with `Bearer x` answered persisted:true) and
    could point `telegram_api_base_url` at their own host. The stored value is now
    HMAC-SHA256(admin key, token): without the key no value opens anything."""
    admin = await login(client)
    saved = await client.put("/api/business-config", headers=admin, json=sample_wire())
    assert saved.status_code == 200, saved.text
    revision = saved.json()["revision"]
    await redis_client.set(keys.ADMIN_SESSION, hashlib.sha256(b"x").hexdigest(),
                           ex=keys.ADMIN_SESSION_TTL_S)
    forged = {"Authorization": "Bearer x"}
    patch = {"telegram_api_base_url": "https://attacker.example", "revision": revision}
    response = await client.put("/api/business-config", headers=forged, json=patch)
    assert_envelope(response, 401, "unauthorized")
    assert_envelope(await client.get("/api/business-config", headers=forged), 401,
                    "unauthorized")

    token = (await client.post("/api/admin/session", headers=admin_headers())).json()["session"]
    stored = await redis_client.get(keys.ADMIN_SESSION)
    assert stored != hashlib.sha256(token.encode()).hexdigest()
    assert stored == hmac.new(bytes.fromhex(ADMIN_KEY), token.encode(),
                              hashlib.sha256).hexdigest()
    # copying the stored value (what Redis shows) opens nothing either
    assert_envelope(await client.get("/api/business-config",
                                     headers={"Authorization": f"Bearer {stored}"}),
                    401, "unauthorized")
    good = await client.get("/api/business-config", headers={"Authorization": f"Bearer {token}"})
    assert good.status_code == 200


async def test_rotating_the_key_ends_every_session(
    embedded_redis_url: str, redis_client: aioredis.Redis,
) -> None:
    """Finding 2 (issue #23): a session made with the old key kept admin rights for up to
    30 min after the key was rotated. A restart with a new key ends it at once; the new key
    signs in as usual."""
    async with running_client(settings_for(embedded_redis_url)) as old:
        session = await login(old)
        assert (await old.get("/api/enabled", headers=session)).status_code == 200
    assert await redis_client.exists(keys.ADMIN_SESSION)  # still stored, unexpired
    async with running_client(settings_for(embedded_redis_url, admin_key=OTHER_KEY)) as new:
        for path in ("/api/enabled", "/api/logs/audit", "/metrics"):
            assert_envelope(await new.get(path, headers=session), 401, "unauthorized")
        fresh = await new.post("/api/admin/session",
                               headers={"Authorization": f"Bearer {OTHER_KEY}"})
        assert fresh.status_code == 200
        headers = {"Authorization": f"Bearer {fresh.json()['session']}"}
        assert (await new.get("/api/enabled", headers=headers)).status_code == 200


async def _finished(redis: aioredis.Redis, entry_ids: list[str], timeout_s: float = 10) -> None:
    async def committed() -> bool:
        return all([await redis.exists(keys.delivery_committed(keys.STREAM_TELEGRAM, entry_id))
                    for entry_id in entry_ids])
    await eventually(committed, f"entries {entry_ids} finished", timeout_s)


async def test_a_stream_entry_for_a_chat_outside_the_allowlist_is_not_answered(
    pipeline: ServedApp,
) -> None:
    """Finding 2 (issue #23): an entry written to `stalwart:telegram` with any `chat_id` was
    answered (`pipeline.events._replies`) without the allowlist being checked again; only the
    webhook checked it. The worker now checks every entry's chat before any reply or JMAP
    call, wherever the entry came from: a message and a button press of a stranger's chat are
    dead letters, and nothing is sent to it."""
    redis, emulator = pipeline.redis, pipeline.emulator
    stranger = pipeline.chat + 1
    message = str(await redis.xadd(keys.STREAM_TELEGRAM, {
        "update_id": "9900001", "chat_id": str(stranger), "text": "/help"}))
    press = str(await redis.xadd(keys.STREAM_TELEGRAM, {
        "update_id": "9900002", "chat_id": str(stranger), "callback_id": "forged-press",
        "callback_data": "r:anything", "message_id": "1"}))
    owner = str(await redis.xadd(keys.STREAM_TELEGRAM, {
        "update_id": "9900003", "chat_id": str(pipeline.chat), "text": "/help"}))
    await _finished(redis, [message, press, owner])
    assert await emulator.sent_messages(pipeline.token, stranger) == []
    assert (await emulator.api_calls(pipeline.token, "answerCallbackQuery")).count == 0
    assert len(await emulator.sent_messages(pipeline.token, pipeline.chat)) == 1  # the owner's
    dead = {fields["source_id"]: fields
            for _id, fields in await redis.xrange(keys.dlq(keys.STREAM_TELEGRAM))}
    assert set(dead) == {message, press}
    assert {d["failure_class"] for d in dead.values()} == {"invalid_payload"}
