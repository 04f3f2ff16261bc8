"""The durable delivery ledger (docs/reference.md §1.3.1): terminal record, lease, intent,
receipt.

The state machine is `docs/reference.md` §1.3.1. For each stream entry:
1. `delivery:committed:{stream}:{id}` exists → the entry is finished (delivered, dead-lettered,
   outcome unknown, or skipped): `BEGIN` acks it and the attempt stops.
2. Otherwise `BEGIN` takes the lease `delivery:inflight:{stream}:{id}` for this attempt: a random
   token plus the consumer name. A lease held by a live consumer (heartbeat present) is never
   taken over, not even when the consumer name is ours and another attempt of ours holds it;
   a lease of ours that none of our attempts holds (its release lost in a failover) is.
3. Before every Telegram call, `Ledger.gate` charges the rate governor's lanes
   (`governor.ACQUIRE`, in the governor's slot) and then `MARK` checks that the lease still
   holds this attempt's token and marks the intent `sending` with the progress (the fence: a
   mismatch raises `LeaseLost` and nothing is sent). Two scripts since issue #35 (one slot
   each): a lease found lost after the lanes were charged cost one rate token. A known failure
   marks the intent `failed` (`MARK`); only a failure that may have reached Telegram leaves it
   `sending`.
4. Success commits the terminal record with the Telegram message ids (whatever the lease says:
   a sent message gets its receipt), deletes lease/intent/retry and XACKs, in one script. A
   failure runs `RETRY_OR_DLQ` (one script, fenced): a retry releases the lease, a dead letter
   writes the terminal record and XACKs.

Every script that XACKs an entry leaves its terminal record in the same script, so an entry is
always either finished (terminal record) or still owned by the stream and its group. On a
stream that forgets its entries (`stalwart:telegram`: the owner's words, issue #12) the same
script also XDELs the entry, so its text is gone from Redis once it is answered.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

from messageweave.jsonio import dump_json
from messageweave.ops.sendlog import Outcome
from messageweave.pipeline.governor import ACQUIRE, Lanes, wait_before
from messageweave.store import keys, waiting
from messageweave.store.redis import Redis
from messageweave.store.scripts import Script
from messageweave.store.streams import forgotten_when_finished

# KEYS: committed, inflight, intent, retry_due, stream
# ARGV: lease, lease_ttl, entry_id, heartbeat_prefix, group, busy_due (ms: a busy entry is due
#       again then), forget (0/1), consumer (ours), live (` tok1 tok2 `: the tokens of our
#       attempts on this entry that are under way)
# → {'terminal', record} (acked, and deleted when forgotten, here) | {'busy'} (due again later)
#   | {'go', intent pairs...}
# A lease is `{token} {consumer}`; one whose consumer has no heartbeat any more (a killed
# process) is taken over, and so is one of ours that none of our attempts holds (its release
# was lost: a commit acknowledged by a primary that died before its replica had it). A bare
# consumer name (a lease from before tokens) reads the same.
BEGIN = Script("""
local record = redis.call('GET', KEYS[1])
if record then
  redis.call('XACK', KEYS[5], ARGV[5], ARGV[3])
  if ARGV[7] == '1' then redis.call('XDEL', KEYS[5], ARGV[3]) end
  redis.call('ZREM', KEYS[4], ARGV[3])
  return {'terminal', record}
end
if not redis.call('SET', KEYS[2], ARGV[1], 'NX', 'EX', ARGV[2]) then
  local held = redis.call('GET', KEYS[2])
  if held then
    local token, holder = string.match(held, '^(%x+) (.+)$')
    holder = holder or held
    local ended = holder == ARGV[8]
      and not (token and string.find(ARGV[9], ' ' .. token .. ' ', 1, true))
    if not ended and redis.call('EXISTS', ARGV[4] .. holder) == 1 then
      redis.call('ZADD', KEYS[4], ARGV[6], ARGV[3])
      return {'busy'}
    end
  end
  redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[2])
end
redis.call('ZREM', KEYS[4], ARGV[3])
local out = {'go'}
for _, v in ipairs(redis.call('HGETALL', KEYS[3])) do out[#out + 1] = v end
return out
""", keys=("committed", "inflight", "intent", "retry_due", "stream"),
    args=("lease", "lease_ttl", "entry_id", "heartbeat_prefix", "group", "busy_due", "forget",
          "consumer", "live"))

# KEYS: inflight, intent
# ARGV: lease, lease_ttl, consumer, state (sending/failed), reply, chunk, now, intent_ttl
# → 1 when written (and the lease extended), 0 when the lease is not ours (nothing written).
MARK = Script("""
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('EXPIRE', KEYS[1], ARGV[2])
redis.call('HSET', KEYS[2], 'consumer', ARGV[3], 'state', ARGV[4], 'reply', ARGV[5],
  'chunk', ARGV[6], 'at', ARGV[7])
redis.call('HDEL', KEYS[2], 'resolution')
redis.call('EXPIRE', KEYS[2], ARGV[8])
return 1
""", keys=("inflight", "intent"),
    args=("lease", "lease_ttl", "consumer", "state", "reply", "chunk", "now", "intent_ttl"))

# KEYS: inflight, intent   ARGV: lease, resolution
# → 1 when written, 0 when the lease is not ours or the intent is gone (nothing written).
# An intent left `sending` whose outcome the policy already settled (`resent`): the next
# attempt resumes from its progress without flagging it again.
RESOLVE = Script("""
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('EXISTS', KEYS[2]) == 0 then return 0 end
redis.call('HSET', KEYS[2], 'resolution', ARGV[2])
return 1
""", keys=("inflight", "intent"), args=("lease", "resolution"))

# KEYS: inflight   ARGV: lease, lease_ttl → 1 renewed, 0 not ours any more
RENEW = Script("""
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('EXPIRE', KEYS[1], ARGV[2])
""", keys=("inflight",), args=("lease", "lease_ttl"))

# KEYS: inflight, retry_due   ARGV: lease, entry_id, due (ms) → 1 given back, 0 not ours
# Give the entry back (shutdown): due again at once, only if the lease is still ours.
RELEASE = Script("""
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
return 1
""", keys=("inflight", "retry_due"), args=("lease", "entry_id", "due"))

# KEYS: committed, inflight, intent, retry_counter, retry_due, stream, retry_window,
#       waiting* (the waiting set of each peer, `store.waiting.waiting_keys`)
# ARGV: record (the terminal record, JSON), committed_ttl, group, entry_id, forget (0/1),
#       member (the entry in the waiting sets)
# → 1
COMMIT = Script("""
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[7])
redis.call('ZREM', KEYS[5], ARGV[4])
for i = 8, #KEYS do redis.call('ZREM', KEYS[i], ARGV[6]) end
redis.call('XACK', KEYS[6], ARGV[3], ARGV[4])
if ARGV[5] == '1' then redis.call('XDEL', KEYS[6], ARGV[4]) end
return 1
""", keys=("committed", "inflight", "intent", "retry_counter", "retry_due", "stream",
           "retry_window", "waiting*"),
    args=("record", "committed_ttl", "group", "entry_id", "forget", "member"))

# KEYS: retry_counter, stream, dlq, inflight, retry_due, intent, committed, retry_window,
#       waiting* (the waiting set of each peer, `store.waiting.waiting_keys`)
# ARGV: group, entry_id, max_attempts, retry_ttl, permanent (0/1), due (ms), payload,
#       failure_class, reason, failed_at, dlq_maxlen, lease, committed_ttl, forget (0/1),
#       peer (1-based position in `store.waiting.PEERS`, 0 = not a peer out of reach),
#       window (s, 0 = off), window_ttl, waiting_ttl, now (ms), member (the entry in the
#       waiting sets)
# → {1, attempts, 0} dead-lettered (terminal record written, acked, deleted when forgotten; the
#   payload is the caller's `dlq_payload`, without private fields), {0, attempts, due ms}
#   scheduled for a retry (lease released), {-1, 0, 0} the lease is not ours (nothing written).
# A peer out of reach (with the window on) waits until `since` + window, `since` being the
# entry's first failure: its due time is cut to the window's end, and a failure at or after
# that end dead-letters it. Every other retryable failure counts against `max attempts`, the
# peer waits left out (§7.11).
RETRY_OR_DLQ = Script("""
if redis.call('GET', KEYS[4]) ~= ARGV[12] then return {-1, 0, 0} end
local n = redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], ARGV[4])
local now_ms = tonumber(ARGV[19])
local now_s = math.floor(now_ms / 1000)
redis.call('HSETNX', KEYS[8], 'since', now_s)
redis.call('EXPIRE', KEYS[8], ARGV[17])
local peer, window, member = tonumber(ARGV[15]), tonumber(ARGV[16]), ARGV[20]
local due = tonumber(ARGV[6])
local dead = ARGV[5] == '1'
if not dead and peer > 0 and window > 0 then
  redis.call('HINCRBY', KEYS[8], 'waits', 1)
  local ends = (tonumber(redis.call('HGET', KEYS[8], 'since')) + window) * 1000
  if now_ms >= ends then
    dead = true
  else
    if due > ends then due = ends end
    for i = 9, #KEYS do
      if i == 8 + peer then
        redis.call('ZADD', KEYS[i], 'NX', now_s, member)
        redis.call('EXPIRE', KEYS[i], ARGV[18])
      else
        redis.call('ZREM', KEYS[i], member)
      end
    end
  end
elseif not dead then
  local waits = tonumber(redis.call('HGET', KEYS[8], 'waits') or '0')
  dead = n - waits >= tonumber(ARGV[3])
  for i = 9, #KEYS do redis.call('ZREM', KEYS[i], member) end
end
if dead then
  local dlq_id = redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[11], '*', 'payload', ARGV[7],
    'source_id', ARGV[2], 'failure_class', ARGV[8], 'reason', ARGV[9], 'attempts', n,
    'failed_at', ARGV[10])
  redis.call('SET', KEYS[7], cjson.encode({state = 'dead_letter', dlq_id = dlq_id,
    failure_class = ARGV[8], attempts = n, at = tonumber(ARGV[10])}), 'EX', ARGV[13])
  redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
  if ARGV[14] == '1' then redis.call('XDEL', KEYS[2], ARGV[2]) end
  redis.call('DEL', KEYS[1], KEYS[4], KEYS[6], KEYS[8])
  redis.call('ZREM', KEYS[5], ARGV[2])
  for i = 9, #KEYS do redis.call('ZREM', KEYS[i], member) end
  return {1, n, 0}
end
redis.call('ZADD', KEYS[5], due, ARGV[2])
redis.call('DEL', KEYS[4])
return {0, n, due}
""", keys=("retry_counter", "stream", "dlq", "inflight", "retry_due", "intent", "committed",
           "retry_window", "waiting*"),
    args=("group", "entry_id", "max_attempts", "retry_ttl", "permanent", "due", "payload",
          "failure_class", "reason", "failed_at", "dlq_maxlen", "lease", "committed_ttl",
          "forget", "peer", "window", "window_ttl", "waiting_ttl", "now", "member"))

DLQ_MAXLEN = 10_000


class LeaseLost(Exception):
    """The attempt's lease holds another token now: stop without sending."""


@dataclass(frozen=True)
class Lease:
    """One attempt's hold on one entry; `value` is what `delivery:inflight` holds."""

    stream: str
    entry_id: str
    value: str

    @property
    def inflight_key(self) -> str:
        return keys.delivery_inflight(self.stream, self.entry_id)


@dataclass(frozen=True)
class SendProgress:
    """How far an entry's sends got: replies fully sent, chunks of the next one sent."""

    reply: int = 0
    chunk: int = 0


@dataclass(frozen=True)
class Begin:
    state: str  # "terminal" | "busy" | "go"
    lease: Lease | None = None
    progress: SendProgress = SendProgress()
    unknown_after_send: bool = False


@dataclass(frozen=True)
class RetryVerdict:
    """What `RETRY_OR_DLQ` made of a failed attempt: dead-lettered, a retry, or fenced."""

    dead_lettered: bool
    attempts: int
    fenced: bool = False
    due_ms: int = 0  # a retry: when it is due (the window's end may have brought it forward)


def _forget(stream: str) -> str:
    """The scripts' `forget` argument: '1' when finishing an entry of `stream` deletes it."""
    return "1" if forgotten_when_finished(stream) else "0"


def _fence_keys(lease: Lease) -> dict[str, str]:
    """The KEYS of the fenced intent scripts (`MARK`, `RESOLVE`)."""
    return {"inflight": lease.inflight_key,
            "intent": keys.delivery_intent(lease.stream, lease.entry_id)}


def terminal_record(state: Outcome, **details: Any) -> dict[str, Any]:
    """The record `COMMIT` leaves: `state` is one of the terminal states (`delivered`,
    `unknown`, `skipped`; `RETRY_OR_DLQ` writes `dead_letter`'s itself)."""
    return {"state": state, **details, "at": int(time.time())}


class Ledger:
    def __init__(self, redis: Redis, consumer: str,
                 lease_ttl_s: int = keys.INFLIGHT_TTL_S) -> None:
        self.redis = redis
        self.consumer = consumer
        self.lease_ttl_s = lease_ttl_s
        # (stream, entry id) → the tokens of this consumer's attempts under way on it: a lease
        # of ours with any other token is stale and `begin` takes it over.
        self._live: dict[tuple[str, str], set[str]] = {}

    @property
    def renew_every_s(self) -> float:
        return self.lease_ttl_s / 3

    async def begin(self, stream: str, entry_id: str) -> Begin:
        token = secrets.token_hex(16)
        lease = Lease(stream, entry_id, f"{token} {self.consumer}")
        busy_due = int((time.time() + self.lease_ttl_s) * 1000)
        live = self._live.get((stream, entry_id), set())
        reply = await BEGIN(self.redis, keys={
            "committed": keys.delivery_committed(stream, entry_id),
            "inflight": lease.inflight_key, "intent": keys.delivery_intent(stream, entry_id),
            "retry_due": keys.retry_due(stream), "stream": stream,
        }, args={
            "lease": lease.value, "lease_ttl": self.lease_ttl_s, "entry_id": entry_id,
            "heartbeat_prefix": keys.worker_heartbeat_prefix(stream),
            "group": keys.CONSUMER_GROUP, "busy_due": busy_due, "forget": _forget(stream),
            "consumer": self.consumer, "live": f" {' '.join(live)} ",
        })
        state = str(reply[0])
        if state != "go":  # terminal (its record is not read) or busy
            return Begin(state)
        self._live.setdefault((stream, entry_id), set()).add(token)
        intent = {str(reply[i]): str(reply[i + 1]) for i in range(1, len(reply) - 1, 2)}
        progress = SendProgress(int(intent.get("reply", 0)), int(intent.get("chunk", 0)))
        unknown = intent.get("state") == "sending" and "resolution" not in intent
        return Begin("go", lease, progress, unknown)

    def ended(self, lease: Lease) -> None:
        """The attempt that began `lease` is over (whatever became of the lease in Redis)."""
        key = (lease.stream, lease.entry_id)
        tokens = self._live.get(key, set())
        tokens.discard(lease.value.split(" ", 1)[0])
        if not tokens:
            self._live.pop(key, None)

    def _intent_args(self, lease: Lease, progress: SendProgress,
                     state: str) -> dict[str, str | int]:
        return {"lease": lease.value, "lease_ttl": self.lease_ttl_s, "consumer": self.consumer,
                "state": state, "reply": progress.reply, "chunk": progress.chunk,
                "now": int(time.time()), "intent_ttl": keys.INTENT_TTL_S}

    async def mark(self, lease: Lease, progress: SendProgress, state: str) -> None:
        """The fence: record the intent (`sending` before a Telegram call, `failed` after a
        known failure) only while the lease is ours; otherwise raise `LeaseLost`."""
        # `sending` reaches a replica before the call (§7.18): lost in a failover, it would
        # let the entry be sent again unseen (not `unknown_after_send`), even at most once.
        run = MARK.replicated if state == "sending" else MARK.__call__
        written = await run(self.redis, keys=_fence_keys(lease),
                            args=self._intent_args(lease, progress, state))
        if not int(written):
            raise LeaseLost

    async def gate(self, lease: Lease, progress: SendProgress, lanes: Lanes) -> None:
        """Right before a Telegram call: wait for the governor's slot on `lanes`, then fence
        the call. Returns once the call may go (the lanes charged, then the intent `sending`
        and the lease extended by `MARK`); raises `LeaseLost` when the lease is not ours, and
        nothing is sent. A wait asks again after at most `governor.MAX_WAIT_S`, the lease
        checked each time. The governor's lanes are in their own slot (`{gov}`), the fence in
        the entry's: a lease found lost right after its lanes were charged costs one rate
        token, which delays the chat's next send by at most one interval (reference §7)."""
        while True:
            wait = int(await ACQUIRE(self.redis, keys=lanes.named,
                                     args={"is_group": lanes.is_group}))
            if wait <= 0:
                await self.mark(lease, progress, "sending")
                return
            if await self.redis.get(lease.inflight_key) != lease.value:
                raise LeaseLost
            await wait_before(wait)

    async def resolve(self, lease: Lease, resolution: str) -> None:
        await RESOLVE(self.redis, keys=_fence_keys(lease),
                      args={"lease": lease.value, "resolution": resolution})

    async def renew(self, lease: Lease) -> bool:
        return bool(int(await RENEW(self.redis, keys={"inflight": lease.inflight_key},
                                    args={"lease": lease.value, "lease_ttl": self.lease_ttl_s})))

    async def commit(self, lease: Lease, record: dict[str, Any]) -> None:
        """Write the terminal record and ack (and delete a forgotten entry). Not fenced: what
        was sent gets its receipt."""
        stream, entry_id = lease.stream, lease.entry_id
        await COMMIT(self.redis, keys={
            "committed": keys.delivery_committed(stream, entry_id),
            "inflight": lease.inflight_key, "intent": keys.delivery_intent(stream, entry_id),
            "retry_counter": keys.retry_counter(stream, entry_id),
            "retry_due": keys.retry_due(stream), "stream": stream,
            "retry_window": keys.retry_window(stream, entry_id),
            "waiting": waiting.waiting_keys(stream),
        }, args={
            "record": dump_json(record),
            "committed_ttl": keys.COMMITTED_TTL_S, "group": keys.CONSUMER_GROUP,
            "entry_id": entry_id, "forget": _forget(stream),
            "member": waiting.member(stream, entry_id),
        })

    async def retry_or_dlq(
        self, lease: Lease, *, payload: str, failure_class: str, reason: str,
        max_attempts: int, permanent: bool, delay_s: float, peer: str | None = None,
        window_s: int = 0,
    ) -> RetryVerdict:
        """Count a failed attempt: a retry due in `delay_s`, or the dead letter. `peer` names
        the peer a failure found out of reach (`store.waiting.PEERS`): with `window_s` > 0 it
        waits until the window from the entry's first failure is over, whatever
        `max_attempts` says (§7.11)."""
        stream, entry_id = lease.stream, lease.entry_id
        now = time.time()
        reply = await RETRY_OR_DLQ(self.redis, keys={
            "retry_counter": keys.retry_counter(stream, entry_id), "stream": stream,
            "dlq": keys.dlq(stream), "inflight": lease.inflight_key,
            "retry_due": keys.retry_due(stream),
            "intent": keys.delivery_intent(stream, entry_id),
            "committed": keys.delivery_committed(stream, entry_id),
            "retry_window": keys.retry_window(stream, entry_id),
            "waiting": waiting.waiting_keys(stream),
        }, args={
            "group": keys.CONSUMER_GROUP, "entry_id": entry_id,
            "max_attempts": max(1, max_attempts), "retry_ttl": keys.RETRY_TTL_S,
            "permanent": "1" if permanent else "0", "due": int((now + delay_s) * 1000),
            "payload": payload, "failure_class": failure_class, "reason": reason,
            "failed_at": int(now), "dlq_maxlen": DLQ_MAXLEN, "lease": lease.value,
            "committed_ttl": keys.COMMITTED_TTL_S, "forget": _forget(stream),
            "peer": waiting.peer_position(peer), "window": max(0, window_s),
            "window_ttl": keys.RETRY_WINDOW_TTL_S, "waiting_ttl": keys.DELIVERY_WAITING_TTL_S,
            "now": int(now * 1000), "member": waiting.member(stream, entry_id),
        })
        code = int(reply[0])
        return RetryVerdict(code == 1, int(reply[1]), fenced=code == -1, due_ms=int(reply[2]))

    async def release(self, lease: Lease) -> None:
        """Give the entry back (shutdown): due again at once, if the lease is still ours."""
        await RELEASE(
            self.redis, keys={"inflight": lease.inflight_key,
                              "retry_due": keys.retry_due(lease.stream)},
            args={"lease": lease.value, "entry_id": lease.entry_id,
                  "due": int(time.time() * 1000)})

    async def due(self, stream: str, limit: int) -> list[str]:
        now_ms = int(time.time() * 1000)
        rows = await self.redis.zrangebyscore(keys.retry_due(stream), "-inf", now_ms,
                                              start=0, num=limit)
        return [str(r) for r in rows]

    async def waiting(self, stream: str, entry_ids: list[str]) -> dict[str, float]:
        """Those of `entry_ids` whose backoff is not over yet → when each is due (Unix s)."""
        now_ms = time.time() * 1000
        scores = await self.redis.zmscore(keys.retry_due(stream), entry_ids)
        return {i: score / 1000 for i, score in zip(entry_ids, scores, strict=True)
                if score is not None and score > now_ms}

    async def due_at(self, stream: str, entry_id: str) -> float | None:
        """When the entry's retry is due (Unix ms), None when it is not waiting for one."""
        score = await self.redis.zscore(keys.retry_due(stream), entry_id)
        return None if score is None else float(score)

    async def defer(self, stream: str, entry_id: str, due_ms: float) -> None:
        """Make an entry that was not attempted due at `due_ms` (behind the entry of its chat
        that waits until then: a drain keeps the chat's order so)."""
        await self.redis.zadd(keys.retry_due(stream), {entry_id: due_ms})

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
