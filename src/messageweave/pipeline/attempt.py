"""One delivery attempt at one stream entry, under its own lease (reference §1.3.1).

`Deliverer.process` is what the worker runs for every entry it takes: `Ledger.begin` gives the
attempt a lease, a renewer keeps it alive while the attempt runs, and `Ledger.gate` checks it
right before each Telegram call (the fence), so no two paths ever send one entry twice
(`docs/reference.md` §1.3.1). A failed attempt is retried with backoff (inline when the retry is
due soon, holding the chat's lane) or dead-lettered; every end is one line of the send log.

A peer out of reach (Telegram or the mail server: connection refused or reset, DNS, a timeout,
a 5xx) is waited for, with backoff capped at `BACKOFF_CAP_S`, for up to `retry_window_s`
(§7.11), always inline on the continuous worker: the chat's later entries wait behind the one
that waits, and a send (or mail read) that gets through to that peer wakes it at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from dataclasses import dataclass

from redis.exceptions import RedisError

from messageweave.aio import raise_if_cancelling
from messageweave.chat.telegram import FailureClass, SendOptions, TelegramSendError, split_text
from messageweave.logs import failure_text, hinted, remedy_for
from messageweave.ops.sendlog import Outcome, record_send
from messageweave.pipeline.events import (
    DeliveryFailure,
    MailPrefetch,
    Muted,
    Outgoing,
    kind_of,
    lane_of,
    outgoing_for,
)
from messageweave.pipeline.governor import Governor, bot_id, lanes_of
from messageweave.pipeline.ledger import (
    Begin,
    Lease,
    LeaseLost,
    Ledger,
    SendProgress,
    terminal_record,
)
from messageweave.services import Services
from messageweave.store import waiting
from messageweave.store.streams import Entry, dlq_payload, is_mail_stream

log = logging.getLogger(__name__)

BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 300.0


def backoff_s(attempt: int, base_s: float = BACKOFF_BASE_S,
              cap_s: float = BACKOFF_CAP_S) -> float:
    """Exponential with ±20 % jitter: about 1, 2, 4 … seconds, never more than `cap_s`
    (5 minutes). Tests scale `base_s` and `cap_s` down (`WorkerOptions`)."""
    delay = base_s * 2 ** min(max(0, attempt - 1), 64)
    return float(min(cap_s, delay * random.uniform(0.8, 1.2)))


@dataclass(frozen=True)
class Retry:
    """A retry an attempt scheduled: due in `delay_s`; `peer` when it waits for a peer out of
    reach (the continuous worker then waits for it inline, whatever the delay)."""

    delay_s: float
    peer: str | None = None



@dataclass
class _Attempt:
    """One try at an entry: its lease, how long its Telegram calls took, and the chat they went
    to (a rule may route a notification away from its lane's chat)."""

    lease: Lease
    telegram_s: float = 0.0
    chat_id: int | None = None

    @property
    def latency_ms(self) -> float:
        return self.telegram_s * 1000


class _MaybeSent(Exception):
    """A Telegram call failed after the request may have reached Telegram."""

    def __init__(self, failure: DeliveryFailure) -> None:
        super().__init__(failure.reason)
        self.failure = failure



def bare_options(options: SendOptions) -> SendOptions:
    """The options of a chunk before a message's last: its topic and silence, no keyboard."""
    return SendOptions(options.thread_id, options.silent)


class Deliverer:
    """Attempts at entries for one consumer: its ledger, the rate governor, the send log.

    `mail` is the worker's `MailPrefetch`: the worker starts and drops its batches, an
    attempt only takes its entry's mail from it (`outgoing_for`)."""

    def __init__(self, svc: Services, ledger: Ledger, governor: Governor, mail: MailPrefetch, *,
                 inline_retry_max_s: float, backoff_base_s: float = BACKOFF_BASE_S,
                 backoff_cap_s: float = BACKOFF_CAP_S) -> None:
        self.svc = svc
        self.ledger = ledger
        self.governor = governor
        self.inline_retry_max_s = inline_retry_max_s
        self.backoff_base_s = backoff_base_s
        self.backoff_cap_s = backoff_cap_s
        # Set (and dropped) when a call gets through to a peer (key: the peer), to wake the
        # entries that wait for it (`pause`); the None key wakes on any peer.
        self._answered: dict[str | None, asyncio.Event] = {}
        self._renewers: set[asyncio.Task[None]] = set()
        # Leases of attempts a Redis error ended before they could give them back: released
        # (by token) by the next maintenance pass, so the entry does not wait for the TTL.
        self._orphans: dict[tuple[str, str], Lease] = {}
        self.mail = mail

    async def process(self, entry: Entry, after: asyncio.Future[None] | None = None,
                      sent: asyncio.Future[None] | None = None, *,
                      hold_for_peers: bool = True) -> Outcome:
        """Deliver one entry through the ledger; returns how it ended (`Outcome`: any but
        `deferred`, which only a drain gives).

        `after` is the chat lane's turn to wait for; `sent` (this entry's place in the lane) is
        resolved as soon as every message of the entry went out, before the commit, so the
        next entry of the chat can send meanwhile (the caller resolves it in any other case).
        A retry due within `inline_retry_max_s` is waited for here, holding the chat's lane,
        and so is, with `hold_for_peers`, every retry that waits for a peer out of reach (the
        continuous worker: the chat's later entries must not overtake it; a drain, which
        answers a request, does not hold); each retry is a new attempt with a new lease."""
        try:
            while True:
                outcome, retry = await self._attempt(entry, after, sent)
                if retry is None:
                    return outcome
                inline = retry.delay_s <= self.inline_retry_max_s
                if not inline and not (hold_for_peers and retry.peer is not None):
                    return outcome  # the due set brings it back (`Worker._recoverable`)
                if retry.peer is None:
                    await asyncio.sleep(retry.delay_s)  # e.g. a 429's retry_after: no waking
                else:
                    await self.pause(retry.delay_s, retry.peer)
        except RedisError as exc:
            raise_if_cancelling()
            log.warning("delivery of %s %s interrupted: %s", entry.stream, entry.id,
                        failure_text(exc))
            return Outcome.INTERRUPTED

    async def pause(self, delay_s: float, peer: str | None = None) -> None:
        """Sleep `delay_s`, or less: until a call gets through to `peer` (any peer: None)."""
        event = self._answered.setdefault(peer, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), max(0.0, delay_s))

    def _answered_by(self, peer: str) -> None:
        """A call got through to `peer`: wake what waits for it (and for any peer)."""
        for key in (peer, None):
            event = self._answered.pop(key, None)
            if event is not None:
                event.set()

    async def _attempt(self, entry: Entry, after: asyncio.Future[None] | None,
                       sent: asyncio.Future[None] | None) -> tuple[Outcome, Retry | None]:
        """One attempt under one lease → (outcome, the retry it scheduled or None)."""
        begin = await self.ledger.begin(entry.stream, entry.id)
        if begin.state == "terminal":
            return Outcome.SKIPPED, None  # finished by another path; BEGIN acked it
        if begin.lease is None:
            return Outcome.BUSY, None  # a live attempt holds it; BEGIN made it due again later
        attempt = _Attempt(begin.lease)
        alive = asyncio.Event()
        renewer = asyncio.create_task(self._keep_lease(attempt.lease, alive))
        self._renewers.add(renewer)
        renewer.add_done_callback(self._renewers.discard)
        try:
            return await self._try(entry, attempt, begin, after, sent)
        except LeaseLost:
            log.info("%s %s: the lease is another attempt's; not sent", entry.stream, entry.id)
            return Outcome.FENCED, None
        except asyncio.CancelledError:
            with contextlib.suppress(RedisError, OSError, asyncio.CancelledError):
                await asyncio.shield(self.ledger.release(attempt.lease))
            raise
        except RedisError:
            self._orphans[(entry.stream, entry.id)] = attempt.lease
            raise_if_cancelling()
            await self.release_orphans([(entry.stream, entry.id)])
            raise
        finally:
            alive.set()
            self.ledger.ended(attempt.lease)

    async def release_orphans(self, only: list[tuple[str, str]] | None = None) -> None:
        for key in list(self._orphans) if only is None else only:
            lease = self._orphans.get(key)
            if lease is None:
                continue
            with contextlib.suppress(RedisError, OSError):
                await self.ledger.release(lease)
                self._orphans.pop(key, None)

    async def _keep_lease(self, lease: Lease, done: asyncio.Event) -> None:
        """Extend the lease every third of its TTL until the attempt ends (or loses it)."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), self.ledger.renew_every_s)
                return
            try:
                if not await self.ledger.renew(lease):
                    return  # not ours any more: the next fence check stops the attempt
            except RedisError as exc:
                raise_if_cancelling()
                log.warning("lease renewal failed: %s", failure_text(exc))

    async def _try(self, entry: Entry, attempt: _Attempt, begin: Begin,
                   after: asyncio.Future[None] | None,
                   sent: asyncio.Future[None] | None) -> tuple[Outcome, Retry | None]:
        if begin.unknown_after_send:
            resolved = await self._resolve_unknown(entry, attempt)
            if resolved is not None:
                return resolved, None
        try:
            ids = await self._deliver_classified(entry, attempt, begin.progress, after)
        except _MaybeSent as maybe:
            resolved = await self._resolve_unknown(entry, attempt)
            if resolved is not None:
                return resolved, None
            return await self._failed(entry, attempt, maybe.failure)
        except DeliveryFailure as failure:
            return await self._failed(entry, attempt, failure)
        if isinstance(ids, Muted):
            skipped = terminal_record(Outcome.SKIPPED, rule=ids.rule)
            await self.ledger.commit(attempt.lease, skipped)
            await self._record(entry, attempt, Outcome.SKIPPED, rule=ids.rule)
            return Outcome.MUTED, None
        if sent is not None and not sent.done():
            sent.set_result(None)  # the chat's next entry may send while this one commits
        delivered = terminal_record(Outcome.DELIVERED, message_ids=ids)
        await self.ledger.commit(attempt.lease, delivered)
        await self._record(entry, attempt, Outcome.DELIVERED, message_ids=ids)
        return Outcome.DELIVERED, None

    async def _resolve_unknown(self, entry: Entry, attempt: _Attempt) -> Outcome | None:
        """A send whose outcome is unknown (an attempt died mid-send, or Telegram's answer was
        lost). `at_most_once`: never resend, flag it and finish the entry as `unknown`.
        `at_least_once`: flag it and go on (None): the entry is sent again."""
        cfg = self.svc.config.config
        policy = cfg.delivery_policy if cfg is not None else "at_least_once"
        if policy == "at_most_once":
            await self.ledger.record_unknown(entry.stream, entry.id, "not_resent")
            await self.ledger.commit(attempt.lease, terminal_record(Outcome.UNKNOWN))
            await self._record(entry, attempt, Outcome.UNKNOWN)
            return Outcome.UNKNOWN
        await self.ledger.record_unknown(entry.stream, entry.id, "resent")
        await self.ledger.resolve(attempt.lease, "resent")
        return None

    async def _deliver_classified(self, entry: Entry, attempt: _Attempt, progress: SendProgress,
                                  after: asyncio.Future[None] | None) -> list[int] | Muted:
        try:
            return await self._deliver(entry, attempt, progress, after)
        except (DeliveryFailure, _MaybeSent, LeaseLost, RedisError):
            raise
        except Exception as exc:  # a bug must not leave the entry retrying forever
            log.exception("delivery of %s %s failed unexpectedly", entry.stream, entry.id)
            raise DeliveryFailure(FailureClass.UNKNOWN, type(exc).__name__) from None

    async def _deliver(self, entry: Entry, attempt: _Attempt, progress: SendProgress,
                       after: asyncio.Future[None] | None) -> list[int] | Muted:
        """The ids of the messages sent, or `Muted`: a rule said to send none, decided before
        the lane wait or any Telegram call."""
        # A reply is worked out only in its turn: the message before it in the chat may change
        # what it says (a grant or revoke of consent before a /summary). A notification
        # depends on nothing of the chat, so its mail is read while the lane is still busy.
        ordered = not is_mail_stream(entry.stream)
        if ordered and after is not None:
            await asyncio.shield(after)
        outgoing = await outgoing_for(entry, self.svc, self.mail)
        if isinstance(outgoing, Muted):
            return outgoing
        if not ordered:
            self._answered_by(waiting.JMAP)  # a notification's mail was read
        if not ordered and after is not None:
            await asyncio.shield(after)  # our turn in the chat lane
        runtime = self.svc.runtime
        if runtime is None:
            raise DeliveryFailure(FailureClass.TRANSIENT, "not configured")
        bot = bot_id(runtime.config.bot_token)
        ids: list[int] = []
        for index, message in enumerate(outgoing):
            if index < progress.reply:
                continue
            start = progress.chunk if index == progress.reply else 0
            ids += await self._send(attempt, bot, message, index, start)
        return ids

    async def _send(self, attempt: _Attempt, bot: str, message: Outgoing, index: int,
                    start: int) -> list[int]:
        """Send the chunks of one message from `start`, one Telegram call each. Right before
        each call the fence (`Ledger.gate`, which also waits for the governor) checks the lease
        and marks the intent."""
        chunks = split_text(message.text)
        last = len(chunks) - 1
        if not chunks:
            raise DeliveryFailure(FailureClass.INVALID_PAYLOAD,
                                  "telegram -: message text is empty")
        ids: list[int] = []
        for number in range(start, len(chunks)):
            lanes = lanes_of(bot, message.chat_id)
            await self.ledger.gate(attempt.lease, SendProgress(index, number), lanes)
            runtime = self.svc.runtime
            if runtime is None:
                raise DeliveryFailure(FailureClass.TRANSIENT, "not configured")
            attempt.chat_id = message.chat_id
            started = time.monotonic()
            try:
                ids += await runtime.telegram.send_text(
                    message.chat_id, chunks[number],
                    options=message.options if number == last else bare_options(message.options))
            except TelegramSendError as exc:
                attempt.telegram_s += time.monotonic() - started
                await self._telegram_failed(attempt, bot, message, SendProgress(index, number), exc)
            else:
                attempt.telegram_s += time.monotonic() - started
                self._answered_by(waiting.TELEGRAM)
        return ids

    async def _telegram_failed(self, attempt: _Attempt, bot: str, message: Outgoing,
                               progress: SendProgress, exc: TelegramSendError) -> None:
        status = exc.status_code if exc.status_code is not None else "-"
        failure = DeliveryFailure(exc.failure_class, f"telegram {status}: {exc.description}",
                                  exc.retry_after, message.chat_id, peer=waiting.TELEGRAM)
        if exc.maybe_sent:
            raise _MaybeSent(failure)  # the intent stays `sending`: outcome unknown
        await self.ledger.mark(attempt.lease, progress, "failed")
        if exc.failure_class == FailureClass.RATE_LIMIT and exc.retry_after:
            await self.governor.pause(bot, message.chat_id, exc.retry_after)
        raise failure

    async def _failed(self, entry: Entry, attempt: _Attempt,
                      failure: DeliveryFailure) -> tuple[Outcome, Retry | None]:
        """Count the attempt: dead-letter it, or schedule a retry. A peer out of reach waits
        for up to `retry_window_s` from the entry's first failure; any other retryable failure
        has `max_retries` (§7.11); the rest are dead-lettered at once."""
        retryable = failure.failure_class.retryable
        attempts = await self.ledger.attempts(entry.stream, entry.id)
        if failure.failure_class == FailureClass.RATE_LIMIT and failure.retry_after:
            delay = failure.retry_after + random.uniform(0, 0.2)
        else:
            delay = backoff_s(attempts + 1, self.backoff_base_s, self.backoff_cap_s)
        cfg = self.svc.config.config
        window_s = cfg.retry_window_s if cfg is not None else 0
        peer = failure.peer if retryable and window_s > 0 else None
        outcome = await self.ledger.retry_or_dlq(
            attempt.lease, payload=dlq_payload(entry.stream, entry.fields),
            failure_class=failure.failure_class.value, reason=failure.reason,
            max_attempts=self.svc.config.outbound.max_retries + 1, permanent=not retryable,
            delay_s=delay, peer=peer, window_s=window_s,
        )
        if outcome.fenced:
            return Outcome.FENCED, None
        if outcome.dead_lettered:
            log.warning("%s %s dead-lettered: %s", entry.stream, entry.id,
                        _dead_letter_text(failure))
            await self._record(entry, attempt, Outcome.DEAD_LETTER, failure.failure_class.value)
            return Outcome.DEAD_LETTER, None
        await self._record(entry, attempt, Outcome.RETRY, failure.failure_class.value)
        if outcome.due_ms:  # the window's end may come before the backoff's
            delay = min(delay, max(0.0, outcome.due_ms / 1000 - time.time()))
        return Outcome.RETRY, Retry(delay, peer)

    async def _record(self, entry: Entry, attempt: _Attempt, outcome: Outcome,
                      failure_class: str | None = None,
                      message_ids: list[int] | None = None, rule: str | None = None) -> None:
        now = time.time()
        chat = attempt.chat_id if attempt.chat_id is not None else lane_of(entry, self.svc)
        await record_send(
            self.svc.redis, stream=entry.stream, event_id=entry.id, kind=kind_of(entry.stream),
            chat_id=chat or None, outcome=outcome, failure_class=failure_class,
            message_ids=message_ids or [], latency_ms=attempt.latency_ms,
            end_to_end_s=max(0.0, now - entry.enqueued_ms / 1000), rule=rule,
        )


def _dead_letter_text(failure: DeliveryFailure) -> str:
    """`class: reason; hint: remedy` of the failure that dead-lettered an entry (the reason is
    short and holds no mail content, `DeliveryFailure`)."""
    kind = failure.failure_class.value
    hint = remedy_for(f"telegram {kind}") if failure.reason.startswith("telegram") else None
    return hinted(f"{kind}: {failure.reason}", hint)
