"""Updates that need no reply are finished together (issue #26): each once, with its terminal
record and its send record, and the one update that needs an answer in their midst gets it."""

from __future__ import annotations

import json

from messageweave.ops.sendlog import Outcome
from messageweave.store import keys
from messageweave.store.oplog import send_log
from tests.helpers import eventually
from tests.served import ServedApp

SECRET = {"X-Telegram-Bot-Api-Secret-Token": "webhook-secret-SECRET"}


def _message(update_id: int, chat: int, **content: object) -> dict[str, object]:
    return {"update_id": update_id, "message": {"message_id": update_id, "date": 0,
                                                "chat": {"id": chat}, **content}}


async def test_a_burst_of_replyless_updates_is_finished_once_each_and_help_is_answered(
    pipeline: ServedApp,
) -> None:
    updates = [_message(910_000 + n, pipeline.chat, text="thanks, see you") if n % 2 else
               _message(910_000 + n, pipeline.chat, sticker={"file_id": "x"}) for n in range(40)]
    updates.insert(20, _message(910_100, pipeline.chat, text="/help"))
    updates.append({"update_id": 910_101})  # no message at all
    for update in updates:
        answer = await pipeline.client.post("/webhook/tg", headers=SECRET, json=update)
        assert answer.status_code == 204, answer.text

    async def drained() -> bool:
        info = await pipeline.redis.xpending(keys.STREAM_TELEGRAM, keys.CONSUMER_GROUP)
        return bool(info["pending"] == 0) and await pipeline.redis.xlen(keys.STREAM_TELEGRAM) == 0

    await eventually(drained, "the stream worked off", 10)
    sent = await pipeline.emulator.wait_for_messages(pipeline.token, pipeline.chat, 1, 5.0)
    assert len(sent) == 1  # the /help answer, once; nothing for the rest
    page = await send_log(pipeline.redis).page(None, 100)
    records = [r for r in page.records if r["stream"] == keys.STREAM_TELEGRAM]
    assert len(records) == len(updates)  # one send record per update, none twice
    assert {r["outcome"] for r in records} == {Outcome.DELIVERED}
    assert len({r["event_id"] for r in records}) == len(updates)
    for record in records:
        key = keys.delivery_committed(keys.STREAM_TELEGRAM, record["event_id"])
        terminal = await pipeline.redis.get(key)
        assert terminal is not None and json.loads(terminal)["state"] == Outcome.DELIVERED
        # Redis does not keep a week of every sticker (issue #26: a flood's records stayed 7
        # days): an update that needed no reply keeps its record an hour; /help's, a week.
        ttl = await pipeline.redis.ttl(key)
        if json.loads(terminal)["message_ids"]:
            assert ttl > keys.REPLYLESS_COMMITTED_TTL_S
        else:
            assert 0 < ttl <= keys.REPLYLESS_COMMITTED_TTL_S
