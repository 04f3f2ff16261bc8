"""The send log: one record per delivery attempt, kept 7 days (reference §1.7).

The pipeline calls `record_send(...)` once per attempt. It appends the record to the
`log:send` stream, writes one JSON log line (`"event":"delivery"`) and counts the attempt in
the delivery metrics, so a delivery needs this one call, not three. A record holds ids,
classes and timings, never message text, mail content or a credential. Recording never fails
the delivery: a Redis error is logged and swallowed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from redis.exceptions import RedisError

from messageweave.ops.metrics import observe_delivery
from messageweave.store import keys
from messageweave.store.oplog import send_log
from messageweave.store.redis import Redis
from messageweave.store.streams import account_of, stream_name

log = logging.getLogger(__name__)


class Outcome(StrEnum):
    """How one delivery attempt at a stream entry ended, in the words Redis, the send log and
    the metrics have always used: `Deliverer.process` returns it, a drain counts it, and the
    first four are the ledger's terminal states (the terminal record's `state`,
    `docs/reference.md` §1.3.1). A send-log record's `outcome` (also the `outcome` label of
    `messageweave_deliveries_total`) is one of the first five."""

    DELIVERED = "delivered"
    DEAD_LETTER = "dead_letter"
    UNKNOWN = "unknown"  # sent or not, nobody knows; `at_most_once` does not resend it
    # A `mute` rule matched (issue #16): nothing was sent, on purpose; not a failure. As an
    # attempt's answer: the entry was finished already (by another path).
    SKIPPED = "skipped"
    RETRY = "retry"
    # Only an attempt's answer, never recorded as such:
    MUTED = "muted"  # this attempt ended the entry `skipped` for a `mute` rule
    BUSY = "busy"  # a live attempt holds the entry's lease
    FENCED = "fenced"  # the lease became another attempt's: nothing (more) sent
    INTERRUPTED = "interrupted"  # a Redis error ended the attempt; the entry comes back
    DEFERRED = "deferred"  # a drain's: not attempted, due behind its chat's waiting entry


async def record_send(
    redis: Redis,
    *,
    stream: str,
    event_id: str,
    kind: str,
    chat_id: int | None,
    outcome: Outcome,
    failure_class: str | None = None,
    latency_ms: float = 0.0,
    message_ids: Sequence[int] = (),
    end_to_end_s: float | None = None,
    rule: str | None = None,
) -> None:
    """`outcome` is one of the five an attempt records (`Outcome`). `latency_ms` is this
    attempt's duration, `end_to_end_s` (when known) the time since the event entered its
    stream; `rule` names the rule that muted a `skipped` mail (the record has the field only
    then)."""
    record = _record(stream=stream, event_id=event_id, kind=kind, chat_id=chat_id,
                     outcome=outcome, failure_class=failure_class, latency_ms=latency_ms,
                     message_ids=message_ids, rule=rule)
    observe_delivery(outcome, failure_class,
                     [end_to_end_s if end_to_end_s is not None else latency_ms / 1000])
    log.info("delivery %s %s %s", record["stream"], event_id, outcome,
             extra={"fields": {"event": "delivery", **record}})
    try:
        await send_log(redis).append(record)
    except RedisError as exc:
        log.warning("send record not written: %s", type(exc).__name__)


async def record_replyless(redis: Redis, stream: str, kind: str,
                           finished: Sequence[tuple[str, int | None, float]]) -> None:
    """The send records of updates finished together because they needed no reply
    (`pipeline.replyless`, issue #26; `finished` = (event id, chat id, seconds since it
    entered its stream) each): one `delivered` record each in the send log, appended in one
    round trip (`OpLog.append_many`), each counted in the metrics, and **one** log line for
    them all (`event:"delivery"`, `count`, `event_ids`). Nothing was sent, so there was no
    attempt to log one by one: a line per sticker cost as much CPU as taking the sticker."""
    if not finished:
        return
    outcome = Outcome.DELIVERED
    records = [_record(stream=stream, event_id=event_id, kind=kind, chat_id=chat_id,
                       outcome=outcome) for event_id, chat_id, _ in finished]
    observe_delivery(outcome, None, [end_to_end_s for _, _, end_to_end_s in finished])
    log.info("delivery %s: %d update(s) needed no reply", records[0]["stream"], len(records),
             extra={"fields": {"event": "delivery", "stream": records[0]["stream"], "kind": kind,
                               "outcome": outcome, "count": len(records),
                               "event_ids": [r["event_id"] for r in records]}})
    try:
        await send_log(redis).append_many(records)
    except RedisError as exc:
        log.warning("send records not written: %s", type(exc).__name__)


def _record(*, stream: str, event_id: str, kind: str, chat_id: int | None, outcome: Outcome,
            failure_class: str | None = None, latency_ms: float = 0.0,
            message_ids: Sequence[int] = (), rule: str | None = None) -> dict[str, Any]:
    """A send-log record (reference §1.7): ids, classes and timings only."""
    record: dict[str, Any] = {
        "stream": stream_name(stream), "event_id": event_id, "kind": kind, "chat_id": chat_id,
        "outcome": outcome, "failure_class": failure_class,
        "latency_ms": round(latency_ms, 1), "message_ids": [int(i) for i in message_ids],
    }
    account = account_of(stream)
    if account is not None and account != keys.DEFAULT_ACCOUNT:
        record["account"] = account  # `default`'s records stay as they were before accounts
    if rule is not None:
        record["rule"] = rule
    return record
