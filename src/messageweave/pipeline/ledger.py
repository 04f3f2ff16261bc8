"""The durable delivery ledger (SPEC D.1): committed → inflight → intent → send → receipt.

For each stream entry:
1. `delivery:committed:{stream}:{id}` exists → already delivered: just XACK.
2. `delivery:inflight:{stream}:{id}` (60 s) is claimed, or someone else is working on it.
3. Before every Telegram call the intent `delivery:intent:{stream}:{id}` is marked `sending`
   with the progress (reply index, chunks done). A known failure marks it `failed`.
4. Success commits the receipt (Telegram message ids), deletes inflight/intent/retry and XACKs,
   in one script. A failure runs `retry_or_dlq` (one script).

An intent still `sending` when an entry is picked up again means an earlier attempt died between
the send and the commit: an `unknown_after_send` record is written to
`delivery:unknown_after_send` and the configured policy decides (resend or not).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from messageweave.store import keys
from messageweave.store.redis import Redis

# KEYS: committed, inflight, intent, retry_due
# ARGV: consumer, inflight ttl, entry id, heartbeat key prefix
# → {'committed'} | {'busy'} | {'go', intent field/value pairs...}
# An inflight claim whose holder has no heartbeat any more (a killed process) is taken over.
BEGIN = """
if redis.call('EXISTS', KEYS[1]) == 1 then return {'committed'} end
if not redis.call('SET', KEYS[2], ARGV[1], 'NX', 'EX', ARGV[2]) then
  local holder = redis.call('GET', KEYS[2])
  if holder ~= ARGV[1] and redis.call('EXISTS', ARGV[4] .. holder) == 1 then
    return {'busy'}
  end
  redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[2])
end
redis.call('ZREM', KEYS[4], ARGV[3])
local out = {'go'}
for _, v in ipairs(redis.call('HGETALL', KEYS[3])) do out[#out + 1] = v end
return out
"""

# KEYS: committed, inflight, intent, retry counter, retry_due, stream
# ARGV: receipt, committed ttl, group, entry id
COMMIT = """
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
redis.call('ZREM', KEYS[5], ARGV[4])
redis.call('XACK', KEYS[6], ARGV[3], ARGV[4])
return 1
"""

# KEYS: retry counter, stream, dlq, inflight, retry_due, intent
# ARGV: group, entry id, max attempts, retry ttl, permanent (0/1), due ms, payload,
#       failure class, reason, failed_at, dlq maxlen
# → {1, attempts} when dead-lettered (and acked), {0, attempts} when scheduled for a retry.
RETRY_OR_DLQ = """
local n = redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], ARGV[4])
if ARGV[5] == '1' or n >= tonumber(ARGV[3]) then
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[11], '*', 'payload', ARGV[7],
    'source_id', ARGV[2], 'failure_class', ARGV[8], 'reason', ARGV[9], 'attempts', n,
    'failed_at', ARGV[10])
  redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
  redis.call('DEL', KEYS[1], KEYS[4], KEYS[6])
  redis.call('ZREM', KEYS[5], ARGV[2])
  return {1, n}
end
redis.call('ZADD', KEYS[5], ARGV[6], ARGV[2])
redis.call('DEL', KEYS[4])
return {0, n}
"""

DLQ_MAXLEN = 10_000


@dataclass(frozen=True)
class Progress:
    """How far an entry's sends got: replies fully sent, chunks of the next one sent."""

    reply: int = 0
    chunk: int = 0


@dataclass(frozen=True)
class Begin:
    state: str  # "committed" | "busy" | "go"
    progress: Progress = Progress()
    unknown_after_send: bool = False


@dataclass(frozen=True)
class Outcome:
    dead_lettered: bool
    attempts: int


class Ledger:
    def __init__(self, redis: Redis, consumer: str) -> None:
        self.redis = redis
        self.consumer = consumer

    async def begin(self, stream: str, entry_id: str) -> Begin:
        reply = await self.redis.eval(
            BEGIN, 4, keys.delivery_committed(stream, entry_id),
            keys.delivery_inflight(stream, entry_id), keys.delivery_intent(stream, entry_id),
            keys.retry_due(stream), self.consumer, keys.INFLIGHT_TTL_S, entry_id,
            keys.WORKER_HEARTBEAT_PREFIX,
        )
        state = str(reply[0])
        if state != "go":
            return Begin(state)
        intent = {str(reply[i]): str(reply[i + 1]) for i in range(1, len(reply) - 1, 2)}
        progress = Progress(int(intent.get("reply", 0)), int(intent.get("chunk", 0)))
        return Begin("go", progress, intent.get("state") == "sending")

    async def mark(self, stream: str, entry_id: str, progress: Progress, state: str) -> None:
        """Record the intent (`sending`, before a Telegram call) or a known outcome (`failed`)."""
        key = keys.delivery_intent(stream, entry_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping={"consumer": self.consumer, "state": state,
                                    "reply": progress.reply, "chunk": progress.chunk,
                                    "at": int(time.time())})
            pipe.expire(key, keys.INTENT_TTL_S)
            pipe.expire(keys.delivery_inflight(stream, entry_id), keys.INFLIGHT_TTL_S)
            await pipe.execute()

    async def commit(self, stream: str, entry_id: str, receipt: dict[str, object]) -> None:
        await self.redis.eval(
            COMMIT, 6, keys.delivery_committed(stream, entry_id),
            keys.delivery_inflight(stream, entry_id), keys.delivery_intent(stream, entry_id),
            keys.retry_counter(stream, entry_id), keys.retry_due(stream), stream,
            json.dumps(receipt, separators=(",", ":")), keys.COMMITTED_TTL_S,
            keys.CONSUMER_GROUP, entry_id,
        )

    async def retry_or_dlq(
        self, stream: str, entry_id: str, *, payload: str, failure_class: str, reason: str,
        max_attempts: int, permanent: bool, delay_s: float,
    ) -> Outcome:
        now = time.time()
        reply = await self.redis.eval(
            RETRY_OR_DLQ, 6, keys.retry_counter(stream, entry_id), stream, keys.dlq(stream),
            keys.delivery_inflight(stream, entry_id), keys.retry_due(stream),
            keys.delivery_intent(stream, entry_id),
            keys.CONSUMER_GROUP, entry_id, max(1, max_attempts), keys.RETRY_TTL_S,
            "1" if permanent else "0", int((now + delay_s) * 1000), payload, failure_class,
            reason, int(now), DLQ_MAXLEN,
        )
        return Outcome(bool(int(reply[0])), int(reply[1]))

    async def release(self, stream: str, entry_id: str) -> None:
        """Give the entry back (shutdown, or busy elsewhere): due again at once."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(keys.delivery_inflight(stream, entry_id))
            pipe.zadd(keys.retry_due(stream), {entry_id: int(time.time() * 1000)})
            await pipe.execute()

    async def defer(self, stream: str, entry_id: str, delay_s: float) -> None:
        await self.redis.zadd(keys.retry_due(stream),
                              {entry_id: int((time.time() + delay_s) * 1000)})

    async def due(self, stream: str, limit: int) -> list[str]:
        now_ms = int(time.time() * 1000)
        rows = await self.redis.zrangebyscore(keys.retry_due(stream), "-inf", now_ms,
                                              start=0, num=limit)
        return [str(r) for r in rows]

    async def waiting(self, stream: str, entry_ids: list[str]) -> set[str]:
        """Those of `entry_ids` whose backoff is not over yet."""
        now_ms = time.time() * 1000
        scores = await self.redis.zmscore(keys.retry_due(stream), entry_ids)
        return {i for i, score in zip(entry_ids, scores, strict=True)
                if score is not None and score > now_ms}

    async def attempts(self, stream: str, entry_id: str) -> int:
        value = await self.redis.get(keys.retry_counter(stream, entry_id))
        return int(value or 0)

    async def forget_due(self, stream: str, entry_id: str) -> None:
        await self.redis.zrem(keys.retry_due(stream), entry_id)

    async def record_unknown(self, stream: str, entry_id: str, resolution: str) -> None:
        now = time.time()
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.zadd(keys.DELIVERY_UNKNOWN, {f"{stream}/{entry_id}/{resolution}": now})
            pipe.zremrangebyscore(keys.DELIVERY_UNKNOWN, "-inf", now - keys.UNKNOWN_RETENTION_S)
            await pipe.execute()

    async def unknown_count(self) -> int:
        return int(await self.redis.zcard(keys.DELIVERY_UNKNOWN))

    async def unknown_records(self) -> list[str]:
        return [str(m) for m in await self.redis.zrange(keys.DELIVERY_UNKNOWN, 0, -1)]
