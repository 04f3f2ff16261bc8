"""The worker that drains `stalwart:jmap` and `stalwart:telegram` (SPEC C.4, D.1, D.2).

Every instance runs one continuously (`run_worker`, started by the app lifespan): XREADGROUP
BLOCK under a consumer name unique to the process, bounded concurrency, and per-chat lanes so
messages to one chat leave in stream order. `POST /worker` and `messageweave drain` call
`Worker.drain_once` for cron-driven deployments.

Recovery (the maintenance pass, every `MAINTENANCE_INTERVAL_S`):
- a consumer whose heartbeat key (`worker:heartbeat:{consumer}`, 15 s) is gone is dead: its
  pending entries are claimed at once and the consumer is removed from the group;
- entries whose backoff is over (`delivery:retry_due:{stream}`) are claimed and retried;
- this process's own pending entries idle for `OWN_IDLE_MS` (e.g. after a Redis error) are
  retried; entries idle past the reference's threshold on a live but stuck consumer are taken
  over with XAUTOCLAIM (the fallback);
- streams are trimmed below what the group still needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import secrets
import socket
import time
from dataclasses import dataclass, field

from redis.exceptions import RedisError

from messageweave.aio import cancel, raise_if_cancelling
from messageweave.api.services import Services
from messageweave.chat.telegram import FailureClass, TelegramSendError, split_text
from messageweave.ops.sendlog import record_send
from messageweave.pipeline.events import (
    DeliveryFailure,
    Outgoing,
    kind_of,
    lane_of,
    outgoing_for,
)
from messageweave.pipeline.governor import Governor, bot_id
from messageweave.pipeline.ledger import Ledger, Progress
from messageweave.store import keys
from messageweave.store.streams import Entry, StreamStore, dlq_payload

log = logging.getLogger(__name__)

MAINTENANCE_INTERVAL_S = 2.0
OWN_IDLE_MS = 10_000
BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 300.0
TRIM_EVERY = 15  # maintenance passes
MAX_BATCH = 10


@dataclass
class WorkerOptions:
    concurrency: int = 16
    block_ms: int = 1000
    inline_retry_max_s: float = 30.0
    shutdown_grace_s: float = 3.0


def consumer_name() -> str:
    """Unique per process: host, pid and a random suffix (pids repeat across containers)."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


def backoff_s(attempt: int) -> float:
    """Exponential with jitter: about 1, 2, 4 … seconds, capped at 5 minutes."""
    delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** max(0, attempt - 1))
    return float(delay * random.uniform(0.8, 1.2))


def idle_threshold_ms(svc: Services) -> int:
    """The reference's XAUTOCLAIM idle time for one entry (inventory §3), the stuck fallback."""
    o = svc.config.outbound
    per = (o.max_retries + 1) * (o.jmap_timeout_ms + o.telegram_timeout_ms + o.llm_timeout_ms) * 2
    return int(min(max(300_000, per), 21_600_000))


@dataclass
class _Lane:
    tail: asyncio.Future[None] | None = None


@dataclass
class DrainResult:
    processed: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)


class Worker:
    def __init__(self, svc: Services, consumer: str | None = None,
                 options: WorkerOptions | None = None) -> None:
        self.svc = svc
        self.consumer = consumer or consumer_name()
        self.options = options or WorkerOptions()
        self.streams = StreamStore(svc.redis)
        self.ledger = Ledger(svc.redis, self.consumer)
        self.governor = Governor(svc.redis)
        self._lanes: dict[int, _Lane] = {}
        self._active: set[tuple[str, str]] = set()
        self._tasks: set[asyncio.Task[str]] = set()
        self._slots = asyncio.Semaphore(self.options.concurrency)
        self._passes = 0

    # --- continuous mode ----------------------------------------------------------------
    async def run(self) -> None:
        maintenance = asyncio.create_task(self._maintenance_loop(), name="worker-maintenance")
        try:
            await self._read_loop()
        finally:
            await cancel(maintenance)  # repeated: one cancellation can be swallowed
            await self._shutdown()

    async def _read_loop(self) -> None:
        ready = False
        while True:
            try:
                if not ready:
                    await self.streams.beat(self.consumer)
                    await self.streams.ensure_groups()
                    ready = True
                await self._slots.acquire()
                self._slots.release()
                free = max(1, self._free_slots())
                entries = await self.streams.read_new(self.consumer, free, self.options.block_ms)
            except RedisError as exc:
                raise_if_cancelling()
                log.warning("worker read failed: %s", type(exc).__name__)
                ready = False
                await asyncio.sleep(0.5)
                continue
            raise_if_cancelling()
            for entry in entries:
                await self.spawn(entry)

    def _free_slots(self) -> int:
        return self.options.concurrency - len(self._tasks)

    async def spawn(self, entry: Entry) -> None:
        """Start processing `entry` in the background (waits for a free slot)."""
        if (entry.stream, entry.id) in self._active:
            return
        await self._slots.acquire()
        self._active.add((entry.stream, entry.id))
        prev, mine = self._ticket(entry)
        task = asyncio.create_task(self._run_one(entry, prev, mine))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_one(self, entry: Entry, prev: asyncio.Future[None] | None,
                       mine: asyncio.Future[None]) -> str:
        try:
            return await self.process(entry, prev)
        finally:
            self._slots.release()
            self._active.discard((entry.stream, entry.id))
            if not mine.done():
                mine.set_result(None)

    def _ticket(self, entry: Entry) -> tuple[asyncio.Future[None] | None, asyncio.Future[None]]:
        """A place in the entry's chat lane: wait for `prev`, then resolve `mine`."""
        lane = self._lanes.setdefault(lane_of(entry, self.svc), _Lane())
        prev = lane.tail if lane.tail is not None and not lane.tail.done() else None
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        lane.tail = mine
        return prev, mine

    async def _shutdown(self) -> None:
        """Stop: cancel in-flight work (each entry releases itself), drop the heartbeat so
        another instance claims what is left at once."""
        deadline = time.monotonic() + self.options.shutdown_grace_s
        while self._tasks and time.monotonic() < deadline:
            # repeated: a library call inside a task can swallow one cancellation
            for task in list(self._tasks):
                task.cancel()
            await asyncio.wait(list(self._tasks), timeout=0.1)
        with contextlib.suppress(RedisError, OSError, asyncio.CancelledError):
            await asyncio.shield(self.streams.stop_beating(self.consumer))

    # --- cron mode ----------------------------------------------------------------------
    async def drain_once(self, batch: int = MAX_BATCH) -> DrainResult:
        """Recover, then read and process at most `batch` new entries per stream, in order.

        Redis errors propagate (the caller answers 503)."""
        batch = MAX_BATCH if batch <= 0 else min(batch, MAX_BATCH)
        await self.streams.beat(self.consumer)
        await self.streams.ensure_groups()
        result = DrainResult()
        entries = await self._recoverable(batch)
        entries += await self.streams.read_new(self.consumer, batch, None)
        for entry in entries:
            if (entry.stream, entry.id) in self._active:
                continue
            self._active.add((entry.stream, entry.id))
            prev, mine = self._ticket(entry)
            try:
                outcome = await self.process(entry, prev)
            finally:
                self._active.discard((entry.stream, entry.id))
                mine.set_result(None)
            result.processed += 1
            result.outcomes[outcome] = result.outcomes.get(outcome, 0) + 1
        return result

    # --- maintenance --------------------------------------------------------------------
    async def _maintenance_loop(self) -> None:
        while True:
            try:
                await self.streams.beat(self.consumer)
                for entry in await self._recoverable(50):
                    await self.spawn(entry)
                self._passes += 1
                if self._passes % TRIM_EVERY == 1:
                    for stream in keys.STREAMS:
                        await self.streams.trim(stream)
            except RedisError as exc:
                raise_if_cancelling()
                log.warning("worker maintenance failed: %s", type(exc).__name__)
            raise_if_cancelling()
            await asyncio.sleep(MAINTENANCE_INTERVAL_S)

    async def _recoverable(self, limit: int) -> list[Entry]:
        """Entries to (re)process now: dead consumers' work, due retries, stalled entries."""
        out: list[Entry] = []
        for stream in keys.STREAMS:
            out += await self._claim_dead(stream, limit)
            due = [i for i in await self.ledger.due(stream, limit)
                   if (stream, i) not in self._active]
            claimed = await self.streams.claim(stream, self.consumer, due)
            for gone in set(due) - {e.id for e in claimed}:
                await self.ledger.forget_due(stream, gone)  # acked or trimmed meanwhile
            out += claimed
            out += await self._stalled(stream, limit)
        seen: set[tuple[str, str]] = set()
        unique = []
        for entry in out:
            key = (entry.stream, entry.id)
            if key not in seen and key not in self._active:
                seen.add(key)
                unique.append(entry)
        return unique

    async def _claim_dead(self, stream: str, limit: int) -> list[Entry]:
        out: list[Entry] = []
        for name, pending in await self.streams.consumers(stream):
            if name == self.consumer or await self.streams.alive(name):
                continue
            if pending:
                ids = await self.streams.pending_of(stream, name, limit)
                claimed = await self.streams.claim(stream, self.consumer, ids)
                log.info("claimed %d entries of dead consumer on %s", len(ids), stream)
                out += await self._not_deferred(stream, claimed)
                if len(ids) < pending:
                    continue
            await self.streams.remove_consumer(stream, name)
        return out

    async def _not_deferred(self, stream: str, entries: list[Entry]) -> list[Entry]:
        """Leave out entries whose backoff is not over yet (the due set brings them back)."""
        if not entries:
            return []
        waiting = await self.ledger.waiting(stream, [e.id for e in entries])
        return [e for e in entries if e.id not in waiting]

    async def _stalled(self, stream: str, limit: int) -> list[Entry]:
        own = await self.streams.idle_pending(stream, self.consumer, OWN_IDLE_MS, limit)
        own = [i for i in own if (stream, i) not in self._active]
        entries = await self._not_deferred(
            stream, await self.streams.claim(stream, self.consumer, own))
        stuck = await self.streams.autoclaim(stream, self.consumer, idle_threshold_ms(self.svc),
                                             limit)
        return entries + await self._not_deferred(stream, stuck)

    # --- one entry ----------------------------------------------------------------------
    async def process(self, entry: Entry, after: asyncio.Future[None] | None = None) -> str:
        """Deliver one entry through the ledger; returns the outcome."""
        stream, entry_id = entry.stream, entry.id
        try:
            begin = await self.ledger.begin(stream, entry_id)
            if begin.state == "committed":
                await self.streams.ack(stream, entry_id)
                return "skipped"
            if begin.state == "busy":
                await self.ledger.defer(stream, entry_id, keys.INFLIGHT_TTL_S)
                return "busy"
            progress = begin.progress
            if begin.unknown_after_send:
                resolved = await self._resolve_unknown(entry)
                if resolved is not None:
                    return resolved
            while True:
                try:
                    ids = await self._deliver_classified(entry, progress, after)
                except DeliveryFailure as failure:
                    delay = await self._failed(entry, failure)
                    if delay is None or delay > self.options.inline_retry_max_s:
                        return "retry" if delay is not None else "dead_letter"
                    await asyncio.sleep(delay)
                    begin = await self.ledger.begin(stream, entry_id)
                    if begin.state != "go":
                        return "retry"
                    progress = begin.progress
                    continue
                await self.ledger.commit(stream, entry_id, {"message_ids": ids,
                                                            "at": int(time.time())})
                await self._record(entry, "delivered", message_ids=ids)
                return "delivered"
        except asyncio.CancelledError:
            with contextlib.suppress(RedisError, OSError, asyncio.CancelledError):
                await asyncio.shield(self.ledger.release(stream, entry_id))
            raise
        except RedisError as exc:
            raise_if_cancelling()
            log.warning("delivery of %s %s interrupted: %s", stream, entry_id,
                        type(exc).__name__)
            return "interrupted"

    async def _resolve_unknown(self, entry: Entry) -> str | None:
        """An earlier attempt died mid-send. `at_most_once`: never resend, flag and commit."""
        cfg = self.svc.config.config
        policy = cfg.delivery_policy if cfg is not None else "at_least_once"
        if policy == "at_most_once":
            await self.ledger.record_unknown(entry.stream, entry.id, "not_resent")
            await self.ledger.commit(entry.stream, entry.id, {"unknown_after_send": True,
                                                              "at": int(time.time())})
            await self._record(entry, "unknown")
            return "unknown"
        await self.ledger.record_unknown(entry.stream, entry.id, "resent")
        return None

    async def _deliver_classified(self, entry: Entry, progress: Progress,
                                  after: asyncio.Future[None] | None) -> list[int]:
        try:
            return await self._deliver(entry, progress, after)
        except (DeliveryFailure, RedisError):
            raise
        except Exception as exc:  # a bug must not leave the entry retrying forever
            log.exception("delivery of %s %s failed unexpectedly", entry.stream, entry.id)
            raise DeliveryFailure(FailureClass.UNKNOWN, type(exc).__name__) from None

    async def _deliver(self, entry: Entry, progress: Progress,
                       after: asyncio.Future[None] | None) -> list[int]:
        outgoing = await outgoing_for(entry, self.svc)
        if after is not None:
            await asyncio.shield(after)  # our turn in the chat lane
        runtime = self.svc.config.runtime
        if runtime is None:
            raise DeliveryFailure(FailureClass.TRANSIENT, "not configured")
        bot = bot_id(runtime.config.bot_token)
        ids: list[int] = []
        for index, message in enumerate(outgoing):
            if index < progress.reply:
                continue
            start = progress.chunk if index == progress.reply else 0
            ids += await self._send(entry, bot, message, index, start)
        return ids

    async def _send(self, entry: Entry, bot: str, message: Outgoing, index: int,
                    start: int) -> list[int]:
        runtime = self.svc.config.runtime
        assert runtime is not None
        for _ in split_text(message.text)[start:]:
            await self.governor.acquire(bot, message.chat_id)
        await self.ledger.mark(entry.stream, entry.id, Progress(index, start), "sending")
        try:
            return await runtime.telegram.send_text(message.chat_id, message.text,
                                                    start_chunk=start)
        except TelegramSendError as exc:
            done = start + len(exc.sent_message_ids)
            await self.ledger.mark(entry.stream, entry.id, Progress(index, done), "failed")
            if exc.failure_class == FailureClass.RATE_LIMIT and exc.retry_after:
                await self.governor.pause(bot, message.chat_id, exc.retry_after)
            status = exc.status_code if exc.status_code is not None else "-"
            raise DeliveryFailure(exc.failure_class, f"telegram {status}: {exc.description}",
                                  exc.retry_after, message.chat_id) from None

    async def _failed(self, entry: Entry, failure: DeliveryFailure) -> float | None:
        """Count the attempt; None when the entry went to the DLQ, else the retry delay."""
        retryable = failure.failure_class.retryable
        attempts = await self._attempts(entry)
        if failure.failure_class == FailureClass.RATE_LIMIT and failure.retry_after:
            delay = failure.retry_after + random.uniform(0, 0.2)
        else:
            delay = backoff_s(attempts + 1)
        outcome = await self.ledger.retry_or_dlq(
            entry.stream, entry.id, payload=dlq_payload(entry.fields),
            failure_class=failure.failure_class.value, reason=failure.reason,
            max_attempts=self.svc.config.outbound.max_retries + 1, permanent=not retryable,
            delay_s=delay,
        )
        if outcome.dead_lettered:
            log.warning("%s %s dead-lettered: %s", entry.stream, entry.id,
                        failure.failure_class.value)
            await self._record(entry, "dead_letter", failure.failure_class.value)
            return None
        await self._record(entry, "retry", failure.failure_class.value)
        return delay

    async def _attempts(self, entry: Entry) -> int:
        return await self.ledger.attempts(entry.stream, entry.id)

    async def _record(self, entry: Entry, outcome: str, failure_class: str | None = None,
                      message_ids: list[int] | None = None) -> None:
        now = time.time()
        chat = lane_of(entry, self.svc) or None
        await record_send(
            self.svc.redis, stream=entry.stream, event_id=entry.id, kind=kind_of(entry.stream),
            chat_id=chat, outcome=outcome, failure_class=failure_class,
            message_ids=message_ids or [], latency_ms=0.0,
            end_to_end_s=max(0.0, now - entry.enqueued_ms / 1000),
        )


_WORKERS: dict[int, Worker] = {}


def worker_for(svc: Services) -> Worker:
    """This instance's worker (one consumer name per process, shared with `POST /worker`)."""
    worker = _WORKERS.get(id(svc))
    if worker is None or worker.svc is not svc:
        worker = _WORKERS[id(svc)] = Worker(svc)
    return worker


async def run_worker(svc: Services) -> None:
    """Consume both streams until cancelled (started by the app lifespan)."""
    try:
        await worker_for(svc).run()
    finally:
        _WORKERS.pop(id(svc), None)
