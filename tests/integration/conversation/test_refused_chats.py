"""Issue #15 (3): the admin finds their chat id among the chats `/webhook/tg` refused. Real Redis;
the first test has the Bot API emulator play a stranger writing to our HTTPS webhook."""

from __future__ import annotations

import time

import httpx
import redis.asyncio as aioredis

from messageweave.store import keys, refused
from tests.helpers import ADMIN_KEY, assert_envelope, configured_and_enabled, sample_wire
from tests.served import ServedApp

ROUTE = "/api/telegram/refused-chats"
WIRE = sample_wire()
SECRET = {"X-Telegram-Bot-Api-Secret-Token": str(WIRE["telegram_webhook_secret"])}
STRANGER = 8_550_001
GROUP = -1_008_550_002


def _update(update_id: int, chat_id: int, **chat: object) -> dict[str, object]:
    return {"update_id": update_id,
            "message": {"message_id": 1, "date": 1, "text": "a private sentence",
                        "chat": {"id": chat_id, "type": "private", **chat}}}


async def _listed(client: httpx.AsyncClient, admin: dict[str, str]) -> list[dict[str, object]]:
    response = await client.get(ROUTE, headers=admin)
    assert response.status_code == 200, response.text
    chats: list[dict[str, object]] = response.json()["chats"]
    return chats


async def test_a_stranger_is_refused_then_listed_with_its_name_and_count_until_allowed(
    served: ServedApp,
) -> None:
    """Catches a refusal that is not remembered (or remembers the message's text, or the
    allowlisted owner), a name or count that is not the sender's, and a chat that stays listed
    after the page added it to the allowlist with the ordinary business-config patch."""
    assert await served.say("/help") == 204  # the owner: allowed, never listed
    before = int(time.time())
    for _ in range(2):
        delivery = await served.emulator.send_user_message(
            served.token, STRANGER, "my secret words", first_name="Zoë", username="zoe_k")
        assert delivery.status == 204  # refused, but answered 204 (issue #23, finding 5)
    group = await served.emulator.send_user_message(
        served.token, GROUP, "hello", from_id=STRANGER + 1, chat_type="group")
    assert group.status == 204

    chats = await _listed(served.client, served.admin)
    assert [(c["chat_id"], c["name"], c["count"]) for c in chats] == [
        (GROUP, "Test group", 1), (STRANGER, "Zoë (@zoe_k)", 2)]
    assert all(before <= int(str(c["last_seen"])) <= time.time() for c in chats)
    stored = await served.redis.hgetall(keys.REFUSED_CHATS_INFO)
    assert not [v for v in stored.values() if "secret" in v or "hello" in v]

    current = (await served.client.get("/api/business-config", headers=served.admin)).json()
    patch = {"chat_allowlist": [served.chat, STRANGER], "revision": current["revision"]}
    saved = await served.client.put("/api/business-config", headers=served.admin, json=patch)
    assert saved.status_code == 200, saved.text
    assert [c["chat_id"] for c in await _listed(served.client, served.admin)] == [GROUP]
    assert await served.say("/help", chat_id=STRANGER) == 204


async def test_a_stranger_is_answered_204_and_recorded_once(served: ServedApp) -> None:
    """Finding 5 (issue #23): a chat outside the allowlist got 403, which Telegram takes for a
    failed delivery and resends, again and again: each stranger's message cost a script run
    per resend and inflated its refused count. It is answered 204 after it is recorded, so
    Telegram forgets it: one delivery, one count, nothing queued for the worker."""
    stranger = STRANGER + 7
    delivery = await served.emulator.send_user_message(served.token, stranger, "hello?")
    assert delivery.status == 204
    pending = await served.emulator.pending_updates(served.token)
    assert delivery.update_id not in pending.pending  # delivered: Telegram will not resend it
    attempts = [d for d in await served.emulator.webhook_deliveries(served.token)
                if d["update_id"] == delivery.update_id]
    assert [d["attempt"] for d in attempts] == [1]
    [listed] = [c for c in await _listed(served.client, served.admin)
                if c["chat_id"] == stranger]
    assert listed["count"] == 1
    assert await served.redis.xlen(keys.STREAM_TELEGRAM) == 0
    assert not await served.redis.exists(keys.dedup_tg(delivery.update_id))


async def test_an_update_posted_twice_counts_once(
    client: httpx.AsyncClient, redis_client: aioredis.Redis,
) -> None:
    """Catches a refused count that counts deliveries, not updates (issue #32, finding 9): the
    same update posted twice (a redelivery, or a replay by anyone holding the secret) showed
    `count` 2 on the page; a new update from the same chat still counts."""
    admin = await configured_and_enabled(client)
    for update_id in (700, 700, 701, 701):
        response = await client.post("/webhook/tg", headers=SECRET,
                                     json=_update(update_id, STRANGER + 9, first_name="Eve"))
        assert response.status_code == 204
    [listed] = [c for c in await _listed(client, admin) if c["chat_id"] == STRANGER + 9]
    assert listed["count"] == 2


async def test_thirty_strangers_leave_only_the_twenty_latest(
    client: httpx.AsyncClient, redis_client: aioredis.Redis,
) -> None:
    """Catches an unbounded record (anyone can write to a bot): 30 refused chats keep the 20
    most recent, newest first, with no hash field left behind by a dropped chat and an EX on
    both keys; and a name that is not cut to one short line."""
    admin = await configured_and_enabled(client)
    ids = [9_000_000 + n for n in range(30)]
    for n, chat_id in enumerate(ids):
        response = await client.post("/webhook/tg", headers=SECRET, json=_update(
            500 + n, chat_id, first_name="x\n\u202e" + "y" * 200))
        assert response.status_code == 204 and response.content == b""
    chats = await _listed(client, admin)
    assert [c["chat_id"] for c in chats] == ids[:-21:-1]
    assert {c["name"] for c in chats} == {("x " + "y" * 200)[:refused.NAME_MAX_CHARS]}
    assert await redis_client.zcard(keys.REFUSED_CHATS) == keys.REFUSED_CHATS_MAX
    assert await redis_client.hlen(keys.REFUSED_CHATS_INFO) == 3 * keys.REFUSED_CHATS_MAX
    for key in (keys.REFUSED_CHATS, keys.REFUSED_CHATS_INFO):
        assert 0 < await redis_client.ttl(key) <= keys.REFUSED_CHATS_TTL_S
    assert not await redis_client.exists(keys.dedup_tg(500))  # refused: nothing was queued


async def test_a_chat_not_refused_for_seven_days_is_forgotten(
    redis_client: aioredis.Redis,
) -> None:
    """Catches a record that only the cap trims: an old refusal must leave the list (and Redis,
    at the next refusal) once `REFUSED_CHATS_TTL_S` has passed."""
    now = time.time()
    await refused.record(redis_client, 11, "old", 1, now=now - keys.REFUSED_CHATS_TTL_S - 5)
    assert [c.chat_id for c in await refused.recent(redis_client, now=now)] == []
    await refused.record(redis_client, 12, "new", 2, now=now)
    assert await redis_client.zrange(keys.REFUSED_CHATS, 0, -1) == ["12"]
    assert sorted(await redis_client.hkeys(keys.REFUSED_CHATS_INFO)) == ["12:count", "12:name",
                                                                     "12:update"]


async def test_nothing_is_remembered_while_switched_off_or_for_an_allowed_chat(
    client: httpx.AsyncClient, redis_client: aioredis.Redis,
) -> None:
    """Catches a write before the switch check (switched off, the webhook must write nothing,
    whatever the body) and a write on the accepted path (one Redis round trip, unchanged)."""
    admin = await configured_and_enabled(client)
    accepted = await client.post("/webhook/tg", headers=SECRET, json=_update(
        1, int(WIRE["telegram_chat_id"]), first_name="Owner"))
    assert accepted.status_code == 204
    await client.put("/api/enabled", headers=admin, json={"enabled": False})
    off = await client.post("/webhook/tg", headers=SECRET, json=_update(2, STRANGER))
    assert_envelope(off, 503, "service_unavailable")
    assert not await redis_client.exists(keys.REFUSED_CHATS, keys.REFUSED_CHATS_INFO)
    assert await _listed(client, admin) == []


async def test_only_the_admin_session_reads_the_list(
    client: httpx.AsyncClient, redis_client: aioredis.Redis,
) -> None:
    """Catches the list opened to another credential: the worker token (a cron), the admin key
    itself (it opens only sign-in) and the webhook secret must not read who wrote to the bot."""
    await configured_and_enabled(client)
    await client.post("/webhook/tg", headers=SECRET, json=_update(3, STRANGER))
    assert_envelope(await client.get(ROUTE), 401, "unauthorized")
    assert_envelope(await client.get(ROUTE, headers=SECRET), 401, "unauthorized")
    for token in (WIRE["worker_token"], WIRE["reconcile_token"], ADMIN_KEY):
        response = await client.get(ROUTE, headers={"Authorization": f"Bearer {token}"})
        assert_envelope(response, 403, "forbidden")
