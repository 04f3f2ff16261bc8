"""Updates that need no reply are finished together (issue #26): each once, with its terminal
record and its send record, and the one update that needs an answer in their midst gets it."""

from __future__ import annotations

import json
import logging

import pytest

from messageweave.ops.sendlog import Outcome, record_replyless
from messageweave.pipeline.events import kind_of
from messageweave.store import keys
from messageweave.store.oplog import send_log
from tests.helpers import eventually
from tests.served import ServedApp

SECRET = {"X-Telegram-Bot-Api-Secret-Token": "webhook-secret-SECRET"}


def _message(update_id: int, chat: int, **content: object) -> dict[str, object]:
    return {"update_id": update_id, "message": {"message_id": update_id, "date": 0,
                                                "chat": {"id": chat}, **content}}


async def test_a_burst_of_replyless_updates_is_finished_once_each_and_help_is_answered(
    pipeline: ServedApp, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="messageweave.ops.sendlog")
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
    records = [r for r in page.records if r["stream"] == "stalwart:telegram"]
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
    # The log names every update exactly once (a batch's line holds its ids).
    lines = [r for r in caplog.records if getattr(r, "fields", {}).get("event") == "delivery"]
    logged = [i for r in lines for i in r.fields.get("event_ids", [r.fields.get("event_id")])]
    assert sorted(logged) == sorted(r["event_id"] for r in records)


async def test_a_batch_of_replyless_updates_is_one_log_line_and_a_send_record_each(
    pipeline: ServedApp, caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue #26: a log line per sticker cost the worker as much CPU as taking the sticker, so
    a flood's log grew by a line per update that needed nothing. A batch writes one line naming
    every id, and the send log still keeps a record each."""
    caplog.set_level(logging.INFO, logger="messageweave.ops.sendlog")
    finished = [(f"1-{n}", pipeline.chat, 0.01) for n in range(40)]
    await record_replyless(pipeline.redis, keys.STREAM_TELEGRAM, kind_of(keys.STREAM_TELEGRAM),
                           finished)
    lines = [r for r in caplog.records if getattr(r, "fields", {}).get("event") == "delivery"]
    assert len(lines) == 1
    assert lines[0].fields["event_ids"] == [i for i, _, _ in finished]
    assert lines[0].fields["count"] == 40
    page = await send_log(pipeline.redis).page(None, 100)
    assert sorted(r["event_id"] for r in page.records) == sorted(i for i, _, _ in finished)
    assert {r["outcome"] for r in page.records} == {Outcome.DELIVERED}
