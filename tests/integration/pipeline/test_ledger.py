"""The ledger's lease, fence and terminal states (docs/reference.md §1.3.1), driven through real
`Worker`s against Redis, Cyrus and the Bot API emulator. `cron_only` runs no worker of its own,
so every send seen here comes from the workers a test drives."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
import urllib.parse
from typing import Any

from messageweave.pipeline.worker import Worker, WorkerOptions
from messageweave.store import keys
from messageweave.store.streams import Entry
from tests.helpers import (
    LaneTurn,
    configure,
    eventually,
    subject_of,
    unknown_records,
    worker_services,
)
from tests.served import ServedApp


async def _read(worker: Worker, pipeline: ServedApp, subject: str) -> Entry:
    """Queue one mail and read it as `worker` (the entry is pending for its consumer)."""
    entry_id = await pipeline.enqueue_mail(pipeline.append(subject))
    await worker.streams.ensure_groups()
    [entry] = await worker.streams.read_new(worker.consumer, 1, None)
    assert entry.id == entry_id
    return entry


async def _pending(pipeline: ServedApp) -> int:
    info = await pipeline.redis.xpending(keys.STREAM_JMAP, keys.CONSUMER_GROUP)
    return int(info["pending"])


async def _terminal(pipeline: ServedApp, entry_id: str) -> dict[str, Any] | None:
    raw = await pipeline.redis.get(keys.delivery_committed(keys.STREAM_JMAP, entry_id))
    return None if raw is None else dict(json.loads(raw))


async def test_a_lease_that_is_not_ours_blocks_the_telegram_call_after_the_lane_wait(
    cron_only: ServedApp, embedded_redis_url: str,
) -> None:
    """Issue #11, the duplicate with cron + in-process worker: both paths of one process shared
    the lease (keyed by consumer name) and nobody looked at it again after waiting for the chat
    lane. Now the lease holds a per-attempt token, a second attempt under the same consumer name
    is `busy`, and a lease that changed hands while the attempt waited for its lane stops it
    before the Telegram call: nothing is sent and the entry is not acked by this attempt."""
    async with worker_services(embedded_redis_url) as svc:
        worker = Worker(svc)
        await worker.beat()
        entry = await _read(worker, cron_only, "fenced")
        inflight = keys.delivery_inflight(keys.STREAM_JMAP, entry.id)
        turn = LaneTurn()
        attempt = asyncio.create_task(worker.process(entry, turn))
        await asyncio.wait_for(turn.waited_for.wait(), 10)

        token, consumer = str(await cron_only.redis.get(inflight)).split(" ", 1)
        assert consumer == worker.consumer and len(token) == 32
        # A second path of the same process (same consumer name) never takes the lease over.
        assert await worker.process(entry) == "busy"
        # Another attempt holds the lease now (as after a takeover).
        other = f"{secrets.token_hex(16)} {worker.consumer}"
        await cron_only.redis.set(inflight, other, ex=keys.INFLIGHT_TTL_S)
        turn.set_result(None)

        assert await asyncio.wait_for(attempt, 10) == "fenced"
        assert await cron_only.emulator.sent_messages(cron_only.token) == []
        assert await _pending(cron_only) == 1
        assert await _terminal(cron_only, entry.id) is None
        assert await cron_only.redis.get(inflight) == other  # left to its holder


async def test_a_lease_left_by_an_ended_attempt_of_the_same_worker_is_taken_over(
    cron_only: ServedApp, embedded_redis_url: str,
) -> None:
    """Catches: an entry that waited out the whole lease (60 s) after a Redis failover. The
    primary acknowledged the worker's commit (terminal record, lease deleted, XACK) and died
    before its replica had it, so the promoted replica still held the entry pending with the
    worker's own lease and a `sending` intent. The worker's next attempt found a lease under
    its own, live consumer name and answered `busy` until it expired: the Sentinel failover
    burst failed "every queued mail finished" in CI. A lease of this worker's that none of its
    attempts holds is stale, and the next attempt takes it over (and resolves the unknown
    send by the policy: `resent`). The state is written here as the promoted replica holds it
    (a failover that loses exactly the commit cannot be timed for real in a test)."""
    async with worker_services(embedded_redis_url) as svc:
        worker = Worker(svc)
        await worker.beat()
        entry = await _read(worker, cron_only, "commit lost")
        inflight = keys.delivery_inflight(keys.STREAM_JMAP, entry.id)
        await cron_only.redis.set(inflight, f"{secrets.token_hex(16)} {worker.consumer}",
                                  ex=keys.INFLIGHT_TTL_S)
        await cron_only.redis.hset(keys.delivery_intent(keys.STREAM_JMAP, entry.id),
                                   mapping={"state": "sending", "reply": 0, "chunk": 0})

        assert await worker.process(entry) == "delivered"
        assert await unknown_records(worker.ledger.redis) == [
            f"{keys.STREAM_JMAP}/{entry.id}/resent"]
        assert await _pending(cron_only) == 0
        record = await _terminal(cron_only, entry.id)
        assert record is not None and record["state"] == "delivered"


async def test_a_dead_lettered_entry_in_a_stale_batch_is_acked_and_not_sent(
    cron_only: ServedApp, embedded_redis_url: str,
) -> None:
    """Issue #11, dead letters were not terminal: `RETRY_OR_DLQ` left no mark, so a batch that
    still held the entry began it again (`go`) and sent it. The dead letter is now the entry's
    terminal record and a stale `begin` acks and skips it."""
    await cron_only.emulator.fail(token=cron_only.token, method="sendMessage", error_code=403,
                                  times=1)
    async with worker_services(embedded_redis_url) as svc:
        first, stale = Worker(svc), Worker(svc)
        entry = await _read(first, cron_only, "dead once")
        assert await first.process(entry) == "dead_letter"
        record = await _terminal(cron_only, entry.id)
        assert record is not None and record["state"] == "dead_letter"
        assert record["failure_class"] == "permission"

        # Telegram would accept it now (the 403 was a one-off): only the record stops it.
        assert await stale.process(entry) == "skipped"
        assert await cron_only.emulator.sent_messages(cron_only.token) == []
        assert await _pending(cron_only) == 0
        assert await cron_only.redis.xlen(keys.dlq(keys.STREAM_JMAP)) == 1


async def test_the_lease_is_renewed_while_a_slow_send_is_alive(
    cron_only: ServedApp, embedded_redis_url: str,
) -> None:
    """Issue #11: the lease (60 s) was never extended while an attempt was alive, and a
    `/summary` reply can take ~2 minutes (LLM timeouts and retries): another worker could take
    the entry over mid-attempt and send it again. Here the lease lives 1 s and the Bot API
    takes 2.5 s to answer; the lease must outlive its TTL and the other worker stays out."""
    await cron_only.emulator.fail(token=cron_only.token, method="sendMessage", delay_ms=2500)
    short = WorkerOptions(lease_ttl_s=1)
    async with worker_services(embedded_redis_url) as svc:
        slow, other = Worker(svc, options=short), Worker(svc, options=short)
        for w in (slow, other):
            await w.beat()
        entry = await _read(slow, cron_only, "slow send")
        inflight = keys.delivery_inflight(keys.STREAM_JMAP, entry.id)
        intent = keys.delivery_intent(keys.STREAM_JMAP, entry.id)
        attempt = asyncio.create_task(slow.process(entry))

        async def sending() -> bool:
            return await cron_only.redis.hget(intent, "state") == "sending"

        await eventually(sending, "the Telegram call under way", 10)
        lease = await cron_only.redis.get(inflight)
        assert lease is not None
        since = time.monotonic()
        while time.monotonic() - since < 2 * short.lease_ttl_s and not attempt.done():
            assert await cron_only.redis.get(inflight) == lease, "the lease lapsed mid-send"
            await asyncio.sleep(0.05)
        assert await other.process(entry) == "busy"

        assert await asyncio.wait_for(attempt, 10) == "delivered"
        sent = await cron_only.emulator.sent_messages(cron_only.token, cron_only.chat)
        assert [subject_of(m.text) for m in sent] == ["slow send"]
        assert await cron_only.redis.get(inflight) is None


async def test_a_replayed_dead_letter_is_a_new_entry_naming_the_old_one_delivered_once(
    pipeline: ServedApp,
) -> None:
    """DLQ replay (issue #11): the replay is a new entry (new id, its own ledger) whose
    `replay_of` names the dead-lettered entry; it is delivered once, and the old entry stays
    dead-lettered (its terminal record keeps every stale copy of it from sending)."""
    await pipeline.emulator.fail(token=pipeline.token, method="sendMessage", error_code=403,
                                 times=1)
    old = await pipeline.enqueue_mail(pipeline.append("replay me"))

    async def dead() -> bool:
        record = await _terminal(pipeline, old)
        return record is not None and record["state"] == "dead_letter"

    await eventually(dead, "the entry dead-lettered", 10)
    replay = await pipeline.client.post("/api/dlq/replay", headers=pipeline.admin,
                                        json={"stream": "stalwart:jmap"})
    assert replay.json() == {"replayed": 1}
    rows = await pipeline.redis.xrange(keys.STREAM_JMAP)
    [(new, fields)] = [(i, f) for i, f in rows if f.get("replay_of") == old]
    assert new != old
    assert set(fields) == {"account_id", "email_id", "replay_of"}

    async def delivered() -> bool:
        record = await _terminal(pipeline, new)
        return record is not None and record["state"] == "delivered"

    await eventually(delivered, "the entry delivered", 10)
    sent = await pipeline.emulator.sent_messages(pipeline.token, pipeline.chat)
    assert [subject_of(m.text) for m in sent] == ["replay me"]
    new_record = await _terminal(pipeline, new)
    assert new_record is not None and new_record["message_ids"] == [sent[0].message_id]
    assert (await _terminal(pipeline, old) or {}).get("state") == "dead_letter"
    assert await _pending(pipeline) == 0


class _SilentBotApi:
    """A Bot API that reads each request whole and then never answers (the first `silent`
    requests; later ones get a real `sendMessage` answer).

    Ours, not the emulator: "the request reached Telegram and the answer was lost" is a fault
    the real Telegram cannot be made to produce on demand, and the emulator always answers
    (late at most), so only a peer that swallows the request gives `maybe_sent` for real."""

    def __init__(self, silent: int) -> None:
        self.silent = silent
        self.texts: list[str] = []
        self._server: asyncio.Server | None = None
        self._held: list[asyncio.StreamWriter] = []

    @property
    def base_url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aenter__(self) -> _SilentBotApi:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for writer in self._held:
            writer.close()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                writer.close()
                return
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            body = await reader.readexactly(length)
            if not head.split(b" ", 2)[1].endswith(b"/sendMessage"):
                # The instance's other calls (the webhook watcher's getWebhookInfo) are
                # answered as Telegram answers them; only sends are swallowed.
                answer = json.dumps({"ok": True, "result": {"url": "", "pending_update_count": 0,
                                                            "has_custom_certificate": False}})
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: " + str(len(answer)).encode() + b"\r\n\r\n"
                             + answer.encode())
                await writer.drain()
                continue
            text = _form_or_json(body).get("text", "")
            self.texts.append(text)
            if len(self.texts) <= self.silent:
                self._held.append(writer)  # read, never answered
                return
            answer = json.dumps({"ok": True, "result": {
                "message_id": len(self.texts), "date": int(time.time()), "text": text,
                "chat": {"id": 1, "type": "private"}}}).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: " + str(len(answer)).encode() + b"\r\n\r\n" + answer)
            await writer.drain()


def _form_or_json(body: bytes) -> dict[str, str]:
    try:
        value = json.loads(body)
    except ValueError:
        return dict(urllib.parse.parse_qsl(body.decode()))
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


async def _point_at(pipeline: ServedApp, api: _SilentBotApi, policy: str) -> None:
    """Send through `api` with a 300 ms Telegram timeout, under `policy`."""
    wire = {**pipeline.wire, "telegram_api_base_url": api.base_url, "delivery_policy": policy}
    await configure(pipeline.client, wire, applied=True, outbound={
        "jmap_timeout_ms": 15000, "telegram_timeout_ms": 300, "llm_timeout_ms": 30000,
        "max_retries": 3})


async def test_a_lost_answer_is_not_resent_at_most_once(
    cron_only: ServedApp, embedded_redis_url: str,
) -> None:
    """`maybe_sent` (the request went out, the answer never came) is the only failure that
    leaves the intent `sending`; `at_most_once` then records the entry as `unknown` and never
    sends it again (it used to be marked `failed` and retried like any timeout)."""
    async with _SilentBotApi(silent=1) as api:
        await _point_at(cron_only, api, "at_most_once")
        async with worker_services(embedded_redis_url) as svc:
            worker = Worker(svc)
            entry = await _read(worker, cron_only, "maybe once")
            assert await worker.process(entry) == "unknown"
            assert [subject_of(t) for t in api.texts] == ["maybe once"]
            record = await _terminal(cron_only, entry.id)
            assert record is not None and record["state"] == "unknown"
            assert await unknown_records(worker.ledger.redis) == [
                f"{keys.STREAM_JMAP}/{entry.id}/not_resent"]
            assert await _pending(cron_only) == 0
            assert await cron_only.redis.xlen(keys.dlq(keys.STREAM_JMAP)) == 0
            # A stale copy of the entry stays unsent: `unknown` is terminal.
            assert await Worker(svc).process(entry) == "skipped"
            assert len(api.texts) == 1


async def test_a_lost_answer_is_resent_once_at_least_once(
    cron_only: ServedApp, embedded_redis_url: str,
) -> None:
    """Under `at_least_once` a lost answer is flagged `resent` (once) and the entry is sent
    again by the retry, which Telegram answers: delivered, with the second send's id."""
    async with _SilentBotApi(silent=1) as api:
        await _point_at(cron_only, api, "at_least_once")
        async with worker_services(embedded_redis_url) as svc:
            worker = Worker(svc)
            entry = await _read(worker, cron_only, "maybe twice")
            assert await worker.process(entry) == "delivered"  # the retry waits inline
            assert [subject_of(t) for t in api.texts] == ["maybe twice", "maybe twice"]
            record = await _terminal(cron_only, entry.id)
            assert record is not None and record["state"] == "delivered"
            assert record["message_ids"] == [2]
            assert await unknown_records(worker.ledger.redis) == [
                f"{keys.STREAM_JMAP}/{entry.id}/resent"]
            assert await _pending(cron_only) == 0
