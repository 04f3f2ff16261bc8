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
from typing import Any

from redis.exceptions import RedisError

from messageweave.ops.metrics import observe_delivery
from messageweave.store.oplog import send_log
from messageweave.store.redis import Redis

log = logging.getLogger(__name__)


async def record_send(
    redis: Redis,
    *,
    stream: str,
    event_id: str,
    kind: str,
    chat_id: int | None,
    outcome: str,
    failure_class: str | None = None,
    latency_ms: float = 0.0,
    message_ids: Sequence[int] = (),
    end_to_end_s: float | None = None,
    rule: str | None = None,
) -> None:
    """`outcome`: delivered, retry, dead_letter, skipped (a `mute` rule matched, issue #16:
    nothing was sent, on purpose; not a failure) or unknown. `latency_ms` is this attempt's
    duration, `end_to_end_s` (when known) the time since the event entered its stream; `rule`
    names the rule that muted a `skipped` mail (the record has the field only then)."""
    record: dict[str, Any] = {
        "stream": stream, "event_id": event_id, "kind": kind, "chat_id": chat_id,
        "outcome": outcome, "failure_class": failure_class,
        "latency_ms": round(latency_ms, 1), "message_ids": [int(i) for i in message_ids],
    }
    if rule is not None:
        record["rule"] = rule
    observe_delivery(outcome, failure_class,
                     end_to_end_s if end_to_end_s is not None else latency_ms / 1000)
    log.info("delivery %s %s %s", stream, event_id, outcome,
             extra={"fields": {"event": "delivery", **record}})
    try:
        await send_log(redis).append(record)
    except RedisError as exc:
        log.warning("send record not written: %s", type(exc).__name__)
