"""Issue #12, item 8: the owner's words are not kept.

What the owner writes to the bot reaches Redis as the `text` of a `stalwart:telegram` entry.
Once the entry is finished (answered, dead-lettered, or needing no answer) nothing in Redis may
hold that text any more; only `dedup:tg:{update_id}` remains. `stalwart:jmap` is not touched by
this: the gap auditor follows mail to its entry until the trim removes it.

The real app (continuous worker included) with real Redis, the Bot API emulator and Cyrus.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from messageweave.pipeline.ledger import Ledger, terminal_record
from messageweave.store import keys
from messageweave.store.streams import StreamStore
from tests.helpers import CYRUS_USER, eventually, login
from tests.served import ServedApp


@pytest.fixture
def owner(pipeline: ServedApp) -> ServedApp:
    """The configured instance of `pipeline` (tests/integration/conftest.py)."""
    return pipeline


@pytest.fixture
async def raw_redis(embedded_redis_url: str) -> AsyncIterator[aioredis.Redis]:
    """Bytes, not str: for DUMP."""
    client = aioredis.from_url(embedded_redis_url)
    yield client
    await client.aclose()


_update_ids = iter(range(120_001, 130_000))


async def _say(owner: ServedApp, text: str | None) -> int:
    """The owner writes `text` (None: a sticker); the Update goes through `/webhook/tg`."""
    update_id = next(_update_ids)
    message: dict[str, Any] = {"message_id": 1, "date": 0,
                               "chat": {"id": owner.chat, "type": "private"}}
    if text is None:
        message["sticker"] = {"file_id": "s"}
    else:
        message["text"] = text
    secret = {"X-Telegram-Bot-Api-Secret-Token": str(owner.wire["telegram_webhook_secret"])}
    response = await owner.client.post("/webhook/tg", headers=secret,
                                       json={"update_id": update_id, "message": message})
    assert response.status_code == 204, response.text
    return update_id


async def _finished(owner: ServedApp) -> None:
    """Wait until no `stalwart:telegram` entry is left to work on."""

    async def done() -> bool:
        info = await owner.redis.xpending(keys.STREAM_TELEGRAM, keys.CONSUMER_GROUP)
        return bool(info["pending"] == 0) and await owner.redis.xlen(keys.STREAM_TELEGRAM) == 0

    await eventually(done, "the update handled", 8)


async def _everything_readable(redis: aioredis.Redis) -> list[str]:
    """Every key name and every value Redis answers for it, read by type."""
    out: list[str] = []
    async for key in redis.scan_iter(count=1000):
        out.append(key)
        kind = await redis.type(key)
        if kind == "string":
            out.append(str(await redis.get(key)))
        elif kind == "hash":
            for field, value in (await redis.hgetall(key)).items():
                out += [field, value]
        elif kind == "list":
            out += await redis.lrange(key, 0, -1)
        elif kind == "set":
            out += list(await redis.smembers(key))
        elif kind == "zset":
            out += [member for member, _ in await redis.zrange(key, 0, -1, withscores=True)]
        elif kind == "stream":
            for entry_id, fields in await redis.xrange(key):
                out.append(entry_id)
                for field, value in fields.items():
                    out += [field, value]
        elif kind == "none":
            # gone between SCAN and TYPE: the app's own loops keep running (the scheduler
            # releases `lock:reconcile`, a slot expires), so a key may vanish meanwhile
            continue
        else:
            pytest.fail(f"{key}: a key of type {kind} this scan does not read")
    return out


async def _serialized(raw: aioredis.Redis) -> list[bytes]:
    """DUMP of every key, uncompressed: what an RDB snapshot or an AOF rewrite would hold,
    including stream bytes XDEL only flagged (they stay until their whole node is deleted)."""
    [previous] = (await raw.config_get("rdbcompression")).values()
    await raw.config_set("rdbcompression", "no")
    try:
        return [bytes(await raw.dump(key) or b"") async for key in raw.scan_iter(count=1000)]
    finally:
        await raw.config_set("rdbcompression", previous)


async def _assert_forgotten(owner: ServedApp, raw: aioredis.Redis, words: str) -> None:
    readable = await _everything_readable(owner.redis)
    assert [v for v in readable if words in v] == []
    assert [d for d in await _serialized(raw) if words.encode() in d] == []
    # the stream's last node was freed, not just flagged
    info = await owner.redis.xinfo_stream(keys.STREAM_TELEGRAM)
    assert info["length"] == 0 and info["radix-tree-keys"] == 0


def _words() -> str:
    return "zq" + secrets.token_hex(6)


async def test_an_answered_search_leaves_nothing_of_the_query_in_redis(
    owner: ServedApp, raw_redis: aioredis.Redis,
) -> None:
    """Bug: after `/search <query>` was answered, the query stayed in `stalwart:telegram` (and
    so in every snapshot): the approximate trim (`XTRIM MINID ~`) never removes a partly filled
    node, so an answered entry lived on until enough newer ones filled its node."""
    query = _words()
    hit = owner.cyrus.append(subject=f"Contract {query}", body=f"the {query} contract")
    owner.cyrus.index(CYRUS_USER)
    update_id = await _say(owner, f"/search {query}")
    [reply] = await owner.emulator.wait_for_messages(owner.token, owner.chat, 1, 8.0)
    assert query in reply.text and hit.email_id in reply.text  # the search did run
    await _finished(owner)
    await _assert_forgotten(owner, raw_redis, query)
    assert await owner.redis.exists(keys.dedup_tg(update_id))
    [receipt] = [k async for k in owner.redis.scan_iter(
        keys.delivery_committed(keys.STREAM_TELEGRAM, "*"))]
    record = json.loads(str(await owner.redis.get(receipt)))
    assert record["state"] == "delivered"  # the ledger's receipt is kept, without the text


async def test_any_text_and_updates_needing_no_reply_are_forgotten_too(
    owner: ServedApp, raw_redis: aioredis.Redis,
) -> None:
    """Bug: entries committed without a reply — plain words the bot stays silent on, an update
    with no text (a sticker) — stayed in the stream with their text like answered ones."""
    words = f"remember the {_words()} appointment"
    said = [await _say(owner, words), await _say(owner, None), await _say(owner, "/help")]
    [marker] = await owner.emulator.wait_for_messages(owner.token, owner.chat, 1, 8.0)
    assert marker.text.startswith("使用说明")  # replies go in order: the others are finished
    await _finished(owner)
    await _assert_forgotten(owner, raw_redis, words)
    assert await owner.redis.exists(*[keys.dedup_tg(u) for u in said]) == 3


async def test_a_dead_lettered_reply_keeps_no_text_and_is_not_replayed(
    owner: ServedApp, raw_redis: aioredis.Redis,
) -> None:
    """Bug: a reply Telegram refused (403, the bot was blocked) went to the DLQ with the
    entry's fields as its payload, the owner's text included, kept with no expiry; a replay
    would answer a days-old command out of the blue."""
    await owner.emulator.fail(token=owner.token, method="sendMessage", error_code=403)
    words = f"/search {_words()}"
    update_id = await _say(owner, words)
    dlq = keys.dlq(keys.STREAM_TELEGRAM)

    async def dead() -> bool:
        return await owner.redis.xlen(dlq) == 1

    await eventually(dead, "the entry dead-lettered", 8)
    await _finished(owner)
    [(_, fields)] = await owner.redis.xrange(dlq)
    assert json.loads(fields["payload"]) == {"update_id": str(update_id),
                                             "chat_id": str(owner.chat)}
    assert fields["failure_class"] == "permission"
    await _assert_forgotten(owner, raw_redis, words.split()[1])
    await owner.emulator.clear_failures(owner.token)

    headers = await login(owner.client)
    replay = await owner.client.post("/api/dlq/replay", headers=headers,
                                     json={"stream": "stalwart:telegram"})
    assert replay.json() == {"replayed": 0}  # refused, and the dead letter discarded
    assert await owner.redis.xlen(dlq) == 0
    assert await owner.redis.xlen(keys.STREAM_TELEGRAM) == 0
    assert await owner.emulator.sent_messages(owner.token) == []


async def test_mail_entries_stay_in_their_stream_and_dlq_as_before(owner: ServedApp) -> None:
    """Bug this guards against: deleting `stalwart:jmap` entries too. The gap auditor follows
    each mail to its entry until the trim removes it, and a mail dead letter must replay."""
    delivered = await owner.enqueue_mail(owner.append("kept for the auditor"))
    missing = await owner.enqueue_mail("Mdoesnotexist0000000000000")
    await owner.emulator.wait_for_messages(owner.token, owner.chat, 1, 8.0)

    async def dead() -> bool:
        return await owner.redis.xlen(keys.dlq(keys.STREAM_JMAP)) == 1

    await eventually(dead, "the entry dead-lettered", 8)
    rows = dict(await owner.redis.xrange(keys.STREAM_JMAP))
    assert {delivered, missing} <= set(rows)
    assert rows[delivered]["account_id"] == CYRUS_USER
    [(_, fields)] = await owner.redis.xrange(keys.dlq(keys.STREAM_JMAP))
    assert json.loads(fields["payload"]) == {"account_id": CYRUS_USER,
                                             "email_id": "Mdoesnotexist0000000000000"}
    await StreamStore(owner.redis).trim(keys.STREAM_JMAP)  # one partly filled node: kept
    assert {delivered, missing} <= {i for i, _ in await owner.redis.xrange(keys.STREAM_JMAP)}


async def _legacy_entries(redis: aioredis.Redis, stream: str, fields: dict[str, str]) -> list[str]:
    """Three entries read and acked the way finished entries were before this rule (no XDEL),
    one read and still pending, one not read yet: all in one partly filled node."""
    await StreamStore(redis).ensure_groups()
    ids = [str(await redis.xadd(stream, fields)) for _ in range(4)]  # type: ignore[arg-type]
    await redis.xreadgroup(keys.CONSUMER_GROUP, "old-worker", {stream: ">"}, count=4)
    await redis.xack(stream, keys.CONSUMER_GROUP, *ids[:3])
    ids.append(str(await redis.xadd(stream, fields)))  # type: ignore[arg-type]
    return ids


async def test_the_trim_removes_answered_owner_words_left_in_a_partly_filled_node(
    either_redis: aioredis.Redis,
) -> None:
    """Bug (the finding itself): `XTRIM MINID ~` only drops whole nodes, so acked entries in a
    partly filled node were never trimmed. On `stalwart:telegram` the trim is exact: every
    acked entry goes, the pending and unread ones stay; `stalwart:jmap` keeps `~`."""
    words = _words()
    tg = await _legacy_entries(either_redis, keys.STREAM_TELEGRAM,
                               {"update_id": "1", "chat_id": "7", "text": words})
    jmap = await _legacy_entries(either_redis, keys.STREAM_JMAP,
                                 {"account_id": CYRUS_USER, "email_id": words})
    store = StreamStore(either_redis)
    for stream in keys.STREAMS:
        await store.trim(stream)
    assert [i for i, _ in await either_redis.xrange(keys.STREAM_TELEGRAM)] == tg[3:]
    assert [i for i, _ in await either_redis.xrange(keys.STREAM_JMAP)] == jmap


async def test_beginning_an_entry_already_finished_deletes_it(
    either_redis: aioredis.Redis,
) -> None:
    """Bug: `BEGIN`'s ack of an entry that already has its terminal record (finished by
    another path, or before this rule) left the entry, and the owner's text, in the stream.
    A mail entry in the same state is acked and kept."""
    words = _words()
    await StreamStore(either_redis).ensure_groups()
    tg = str(await either_redis.xadd(keys.STREAM_TELEGRAM,
                                     {"update_id": "2", "chat_id": "7", "text": words}))
    mail = str(await either_redis.xadd(keys.STREAM_JMAP,
                                       {"account_id": CYRUS_USER, "email_id": words}))
    await either_redis.xreadgroup(keys.CONSUMER_GROUP, "c", {keys.STREAM_TELEGRAM: ">",
                                                             keys.STREAM_JMAP: ">"})
    record = json.dumps(terminal_record("delivered", message_ids=[1]))
    for stream, entry_id in ((keys.STREAM_TELEGRAM, tg), (keys.STREAM_JMAP, mail)):
        await either_redis.set(keys.delivery_committed(stream, entry_id), record)
    ledger = Ledger(either_redis, "c")
    assert (await ledger.begin(keys.STREAM_TELEGRAM, tg)).state == "terminal"
    assert (await ledger.begin(keys.STREAM_JMAP, mail)).state == "terminal"
    assert await either_redis.xlen(keys.STREAM_TELEGRAM) == 0
    assert [i for i, _ in await either_redis.xrange(keys.STREAM_JMAP)] == [mail]
    for stream in keys.STREAMS:
        assert (await either_redis.xpending(stream, keys.CONSUMER_GROUP))["pending"] == 0
