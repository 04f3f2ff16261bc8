"""The worker that drains every account's `stalwart:jmap` and the deployment's
`stalwart:telegram` (reference §1.3, §1.3.1).

Every instance runs one continuously (`run_worker`, started by the app lifespan): one
XREADGROUP BLOCK over the mail stream of each account served (`services.AccountRegistry`) and
the chat stream, under a consumer name unique to the process, bounded concurrency, and per-chat
lanes so messages to one chat leave in stream order. Each account's mail may hold only its share
of the slots (`pipeline.shares`, issue #35, SPEC G.5): a backlog of one account, whose entries
wait in its chat's lane, never keeps another account's new mail from being read and run.
`POST /worker` and `messageweave drain` call `Worker.drain_once` for cron-driven deployments.

Every attempt at an entry holds its own lease (`Ledger.begin`), kept alive by a renewer while
the attempt runs and checked right before each Telegram call (`Ledger.gate`, the fence), so the
continuous worker, `POST /worker`, `messageweave drain` and other instances never send one entry
twice (`docs/reference.md` §1.3.1).

Recovery (the maintenance pass, every `MAINTENANCE_INTERVAL_S`; `pipeline.recovery`): a dead
consumer's entries, due retries, stalled entries; only the streams that have anything pending
or due are looked at closely, every stream on every `TRIM_EVERY`th pass. Each consumer's
heartbeat on each stream it reads (`worker:heartbeat:{stream}:{consumer}`, 15 s) is refreshed
every `HEARTBEAT_INTERVAL_S`, all in one round trip. Streams are trimmed below what the group
still needs on the passes that look at every stream.

The loops' Redis failures are logged through `logs.RepeatLog` (`Worker.failures`): class,
reason and what to check, once a minute per loop and class with a count, one line on recovery.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from redis.exceptions import RedisError

from messageweave.aio import cancel, raise_if_cancelling
from messageweave.logs import RepeatLog
from messageweave.ops.sendlog import Outcome
from messageweave.pipeline import shares
from messageweave.pipeline.attempt import BACKOFF_BASE_S, BACKOFF_CAP_S, Deliverer
from messageweave.pipeline.events import MailPrefetch, lane_of
from messageweave.pipeline.governor import Governor
from messageweave.pipeline.ledger import Ledger
from messageweave.pipeline.recovery import Recovery
from messageweave.pipeline.replyless import finish_replyless
from messageweave.services import Services
from messageweave.store import keys
from messageweave.store.streams import Entry, StreamStore

log = logging.getLogger(__name__)

MAINTENANCE_INTERVAL_S = 2.0
# Three beats per `WORKER_HEARTBEAT_TTL_S` (15 s): one lost beat never makes a live worker dead.
HEARTBEAT_INTERVAL_S = 5.0
TRIM_EVERY = 15  # maintenance passes
MAX_BATCH = 10
# The places of the failure lines (`RepeatLog`).
READ = "worker read"
MAINTENANCE = "worker maintenance"
HEARTBEAT = "worker heartbeat"


@dataclass
class WorkerOptions:
    concurrency: int = 64
    block_ms: int = 1000
    inline_retry_max_s: float = 30.0
    shutdown_grace_s: float = 3.0
    lease_ttl_s: int = keys.INFLIGHT_TTL_S
    # The retry backoff (`attempt.backoff_s`): base × 2^(n−1), capped. Tests scale both down,
    # so an outage of seconds runs through as many capped waits as one of minutes would.
    backoff_base_s: float = BACKOFF_BASE_S
    backoff_cap_s: float = BACKOFF_CAP_S


def consumer_name() -> str:
    """Unique per process: host, pid and a random suffix (pids repeat across containers)."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclass
class _Lane:
    tail: asyncio.Future[None] | None = None


@dataclass
class DrainResult:
    processed: int = 0
    outcomes: dict[Outcome, int] = field(default_factory=dict)


class Worker:
    def __init__(self, svc: Services, consumer: str | None = None,
                 options: WorkerOptions | None = None) -> None:
        self.svc = svc
        self.consumer = consumer or consumer_name()
        self.options = options or WorkerOptions()
        self.streams = StreamStore(svc.redis)
        self.ledger = Ledger(svc.redis, self.consumer, self.options.lease_ttl_s)
        self.governor = Governor(svc.redis)
        self._lanes: dict[int, _Lane] = {}
        # Entries this process works on or has taken to work on (read, claimed, in a batch):
        # the maintenance pass never reclaims them as stalled.
        self._active: set[tuple[str, str]] = set()
        self._tasks: dict[asyncio.Task[Outcome], Entry] = {}  # each running entry's task
        # The mail of entries taken together, fetched in one Email/get: started for each
        # batch taken (`_take`), dropped when an entry is finished; attempts take from it.
        self.mail = MailPrefetch(svc)
        self.deliverer = Deliverer(svc, self.ledger, self.governor, self.mail,
                                   inline_retry_max_s=self.options.inline_retry_max_s,
                                   backoff_base_s=self.options.backoff_base_s,
                                   backoff_cap_s=self.options.backoff_cap_s)
        # Entries taken from a dead consumer before their backoff was over → when it is (Unix
        # s): each waits for it in its chat's lane (`_run_one`).
        self._not_before: dict[tuple[str, str], float] = {}
        self._first_pass = asyncio.Event()  # the maintenance loop's first pass is over
        self.recovery = Recovery(svc, self.streams, self.ledger, self.consumer, self._active,
                                 self._not_before)
        self.process = self.deliverer.process
        self._held: dict[str, int] = {}  # stream → its entries running (`shares`)
        self._grouped: set[str] = set()  # streams whose consumer group this worker made
        self._beaten: set[str] = set()  # streams this worker has written a heartbeat on
        self._freed = asyncio.Event()  # set each time an entry's task ends
        self._passes = 0
        self.failures = RepeatLog(log)

    # --- continuous mode ----------------------------------------------------------------
    async def run(self) -> None:
        beating = asyncio.create_task(self._keep_beating(), name="worker-heartbeat")
        maintenance = asyncio.create_task(self._maintenance_loop(), name="worker-maintenance")
        try:
            await self._read_loop()
        finally:
            await cancel(maintenance)  # repeated: one cancellation can be swallowed
            await self._shutdown(beating)

    async def _read_loop(self) -> None:
        ready = False
        # What a stopped worker left (a chat's waiting entry and those behind it) takes its
        # places in the lanes before anything newer is read.
        await self._first_pass.wait()
        while True:
            try:
                streams = self._streams()
                if not ready or not self._beaten.issuperset(streams):  # or a new stream:
                    await self.beat()  # alive on a stream before reading it (§7.17)
                if not ready:  # the first read, or one after a failed read
                    self._grouped.clear()  # a Redis that came back empty has no groups
                await self._ensure_groups(streams)
                ready = True
                await self._room_for_a_batch()
                readable, count = self._readable(streams)
                entries = await self.streams.read_new(self.consumer, count,
                                                      self.options.block_ms, readable)
            except RedisError as exc:
                raise_if_cancelling()
                self.failures.failed(READ, exc)
                ready = False
                await asyncio.sleep(0.5)
                continue
            raise_if_cancelling()
            self.failures.recovered(READ)
            try:  # those that need no reply, together (issue #26)
                entries = await finish_replyless(self.svc, entries)
            except RedisError as exc:  # still pending: the maintenance pass takes them again
                raise_if_cancelling()
                self.failures.failed(READ, exc)
                continue
            for entry in self._take(entries):
                self._start(entry)

    def _free_slots(self) -> int:
        """The slots not taken, each stream's counted up to its share of now (`shares.taken`):
        what an account took above it, or holds while paused or deleted, is free for others."""
        streams, concurrency = self._streams(), self.options.concurrency
        return (shares.capacity(streams, concurrency)
                - shares.taken(streams, self._held, concurrency))

    def _streams(self) -> list[str]:
        """What the worker consumes: the mail stream of every account served (a paused
        account's waits for its resume) and the chat stream; `default`'s alone while no
        configuration is live."""
        if self.svc.config.config is None:
            return list(keys.STREAMS)
        return [*(a.keys.stream_jmap for a in self.svc.accounts.served()), keys.STREAM_TELEGRAM]

    async def _ensure_groups(self, streams: list[str]) -> None:
        """Make the consumer group of each of `streams` this worker has not made yet (a fresh
        Redis, an account just added); the read loop and the maintenance pass share the set."""
        missing = [stream for stream in streams if stream not in self._grouped]
        if missing:
            await self.streams.ensure_groups(missing)
            self._grouped.update(missing)

    def _readable(self, streams: list[str]) -> tuple[list[str], int]:
        """The streams with room for another entry, and how many to read from each: no mail
        stream is read past its account's share (`shares.readable`)."""
        return shares.readable(streams, self._held, self.options.concurrency,
                               self._free_slots())

    async def _room_for_a_batch(self) -> None:
        """Wait until `shares.batch` slots are free (a quarter, or what the accounts leave):
        woken when an entry ends, and at least every `block_ms`, as the read's own wait, for
        an account added or gone (each changes the shares)."""
        while self._free_slots() < shares.batch(self._streams(), self.options.concurrency):
            self._freed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._freed.wait(), self.options.block_ms / 1000)

    def _take(self, entries: list[Entry]) -> list[Entry]:
        """Mark `entries` as ours to work on (leaving out those already taken), at once: no
        await between a fetch and this, so no other path can reclaim them meanwhile. Their
        mails are fetched together, in the background (`MailPrefetch`)."""
        taken = []
        for entry in entries:
            key = (entry.stream, entry.id)
            if key not in self._active:
                self._active.add(key)
                taken.append(entry)
        self.mail.start(taken)
        return taken

    def spawn(self, entry: Entry) -> None:
        """Start processing `entry` in the background. Its stream's room is the caller's to
        mind (`shares.readable` for a read, `shares.rooms` for the maintenance pass's)."""
        if self._take([entry]):
            self._start(entry)

    def _start(self, entry: Entry) -> None:
        """Run a taken entry in the background, holding a slot of its stream (`_held`)."""
        prev, mine = self._ticket(entry)
        self._held[entry.stream] = self._held.get(entry.stream, 0) + 1
        task = asyncio.create_task(self._run_one(entry, prev, mine))
        self._tasks[task] = entry
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[Outcome]) -> None:
        self._tasks.pop(task, None)

    async def _run_one(self, entry: Entry, prev: asyncio.Future[None] | None,
                       mine: asyncio.Future[None]) -> Outcome:
        try:
            not_before = self._not_before.pop((entry.stream, entry.id), None)
            if not_before is not None and not_before > time.time():
                # its backoff, holding the lane (a call that gets through to a peer ends it)
                await self.deliverer.pause(not_before - time.time())
            return await self.process(entry, prev, mine)
        finally:
            self._held[entry.stream] -= 1
            self._freed.set()
            self._finish(entry, mine)

    def _finish(self, entry: Entry, mine: asyncio.Future[None]) -> None:
        """The end of every entry a path gave a turn in its lane (`_run_one`, `_drain_one`),
        whatever the outcome: its place in the lane is passed on and the entry released."""
        if not mine.done():
            mine.set_result(None)
        self._release(entry)

    def _release(self, entry: Entry) -> None:
        """No longer ours to work on (the maintenance pass may reclaim it), and its batch's
        mail, if an attempt did not take it (busy, finished, cancelled), dropped."""
        self._active.discard((entry.stream, entry.id))
        self.mail.forget(entry)

    def _ticket(self, entry: Entry) -> tuple[asyncio.Future[None] | None, asyncio.Future[None]]:
        """A place in the entry's chat lane: wait for `prev`, then resolve `mine`."""
        lane = self._lanes.setdefault(lane_of(entry, self.svc), _Lane())
        prev = lane.tail if lane.tail is not None and not lane.tail.done() else None
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        lane.tail = mine
        return prev, mine

    async def _shutdown(self, beating: asyncio.Task[None]) -> None:
        """Stop: cancel in-flight work (each attempt releases its lease), then drop the
        heartbeat so another instance claims what is left at once."""
        deadline = time.monotonic() + self.options.shutdown_grace_s
        while self._tasks and time.monotonic() < deadline:
            # repeated: a library call inside a task can swallow one cancellation
            for task in list(self._tasks):
                task.cancel()
            await asyncio.wait(list(self._tasks), timeout=0.1)
        self.mail.close()
        await cancel(beating)
        with contextlib.suppress(RedisError, OSError, asyncio.CancelledError):
            await asyncio.shield(self.stop_beating())

    async def beat(self) -> None:
        """Refresh this consumer's heartbeat on every stream it reads (§7.17)."""
        self._beaten.update(streams := self._streams())
        await self.streams.beat(self.consumer, streams)

    async def stop_beating(self) -> None:  # what it left is claimable at once
        await self.streams.stop_beating(self.consumer, sorted(self._beaten))

    async def _keep_beating(self) -> None:  # its own loop: a maintenance pass can take long
        await self._repeat(HEARTBEAT, HEARTBEAT_INTERVAL_S, self.beat)

    async def _repeat(self, what: str, interval_s: float,
                      step: Callable[[], Awaitable[object]]) -> None:
        """Run `step` every `interval_s` until cancelled; a Redis error is counted against
        `what` (`self.failures`) and never stops the loop, a success clears it."""
        while True:
            try:
                await step()
            except RedisError as exc:
                raise_if_cancelling()
                self.failures.failed(what, exc)
            else:
                self.failures.recovered(what)
            raise_if_cancelling()
            await asyncio.sleep(interval_s)

    # --- cron mode ----------------------------------------------------------------------
    async def drain_once(self, batch: int = MAX_BATCH) -> DrainResult:
        """Recover, then read and process at most `batch` new entries per stream, in order.

        The whole batch is taken (`_active`) as soon as it is fetched, and the heartbeat is kept
        up while it runs. Redis errors propagate (the caller answers 503)."""
        batch = MAX_BATCH if batch <= 0 else min(batch, MAX_BATCH)
        streams = self._streams()
        await self.beat()
        await self.streams.ensure_groups(streams)
        beating = asyncio.create_task(self._keep_beating(), name="drain-heartbeat")
        result = DrainResult()
        taken: list[Entry] = []
        # A chat whose entry was left waiting for its retry (lane → when it is due, ms): the
        # chat's later entries of the batch are not attempted, but made due right after it.
        blocked: dict[int, float] = {}
        try:
            taken += self._take(await self.recovery.recoverable(streams, batch))
            taken += self._take(await self.streams.read_new(self.consumer, batch, None, streams))
            for entry in taken:
                outcome = await self._drain_one(entry, blocked)
                result.processed += 1
                result.outcomes[outcome] = result.outcomes.get(outcome, 0) + 1
        finally:
            for entry in taken:  # those a Redis error left unprocessed
                self._release(entry)
            await cancel(beating)
        return result

    async def _drain_one(self, entry: Entry, blocked: dict[int, float]) -> Outcome:
        """One entry of a drain, in its lane's turn: attempted, or deferred behind its chat's
        entry that waits for a retry (`blocked`: lane → when it is due, ms)."""
        lane = lane_of(entry, self.svc)
        prev, mine = self._ticket(entry)
        try:
            if lane in blocked:
                await self.ledger.defer(entry.stream, entry.id, blocked[lane])
                return Outcome.DEFERRED
            outcome = await self.process(entry, prev, mine, hold_for_peers=False)
            if outcome is Outcome.RETRY:
                due = await self.ledger.due_at(entry.stream, entry.id)
                if due is not None:
                    blocked[lane] = due
            return outcome
        finally:
            self._finish(entry, mine)

    # --- maintenance --------------------------------------------------------------------
    async def _maintenance_loop(self) -> None:
        await self._repeat(MAINTENANCE, MAINTENANCE_INTERVAL_S, self._maintenance_pass)

    async def _maintenance_pass(self) -> None:
        try:
            streams = self._streams()
            await self._ensure_groups(streams)  # not made by the read loop yet
            await self.deliverer.release_orphans()
            await self._drop_gone(streams)
            room = shares.rooms(streams, self._held, self.options.concurrency)
            tidy = self._passes % TRIM_EVERY == 0  # every stream looked at, and trimmed
            for entry in await self.recovery.recoverable(streams, 50, hold=True, room=room,
                                                         tidy=tidy):
                self.spawn(entry)
            self._passes += 1
            if tidy:
                for stream in streams:
                    await self.streams.trim(stream)
        finally:
            self._first_pass.set()

    async def _drop_gone(self, streams: list[str]) -> None:
        """Cancel the attempts of an account deleted meanwhile (its stream is in no account of
        the registry any more): they would wait on for its mail server, and write its keys
        after its sweep. A paused account's run on: its entries are still to be delivered."""
        if self.svc.config.config is None:
            return
        kept = {*streams, *(a.keys.stream_jmap for a in self.svc.accounts.every())}
        gone = [task for task, entry in self._tasks.items() if entry.stream not in kept]
        for task in gone:
            task.cancel()
        if gone:
            log.info("stopped %d attempts of deleted accounts", len(gone))
            await asyncio.wait(gone, timeout=self.options.shutdown_grace_s)


async def run_worker(worker: Worker) -> None:
    """Consume both streams until cancelled: the serving instance's worker, which
    `runtime.serving` builds and also hands to `POST /worker` (one consumer per process)."""
    await worker.run()
