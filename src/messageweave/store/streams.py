"""Redis Streams plumbing for the delivery pipeline: ingress, group reads, claims, DLQ, stats.

Every entry of `stalwart:jmap` / `stalwart:telegram` holds only what the worker needs
(docs/reference.md §1.3).
Streams are trimmed with `XTRIM MINID` below the oldest entry the group still needs, so an
unprocessed entry is never trimmed away.

A `stalwart:telegram` entry holds the owner's own words (issue #12): the ledger script that
finishes it also deletes it (`forgotten_when_finished`), its text never goes to the DLQ
(`dlq_payload`), its dead letters are never replayed (`StreamStore.replay`), and its stream is
trimmed exactly rather than by whole nodes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from redis.crc import key_slot
from redis.exceptions import ResponseError

from messageweave.aio import Batcher
from messageweave.jsonio import dump_json
from messageweave.store import keys
from messageweave.store.cluster_wait import read_now, wait_on_every_slot
from messageweave.store.redis import Redis
from messageweave.store.redis_url import is_cluster
from messageweave.store.scripts import Script

# `/api/delivery`'s `unread` counts at most this many entries (Redis 6.2 has no `lag`).
UNREAD_COUNT_CAP = 10_000
# Streams whose entries are deleted by the script that finishes them (terminal record + XACK),
# and the fields of their entries that are never copied anywhere (DLQ payload included). Not
# `stalwart:jmap`: the gap auditor follows mail to its entry until the trim removes it.
FORGET_WHEN_FINISHED = frozenset({keys.STREAM_TELEGRAM})
PRIVATE_FIELDS = {keys.STREAM_TELEGRAM: frozenset({"text"})}
# Added to an entry put back from the DLQ: the id of the entry that was dead-lettered. The
# worker does not read it; the replayed entry has its own id and its own ledger.
REPLAY_OF = "replay_of"

# KEYS: stream (stalwart:telegram), enabled (config:enabled), claims* (dedup:tg:{update_id}
#       of each update)
# ARGV: ttl, updates* (per update the number of its field/value parts, then the parts)
# → 0 when the service is switched off (nothing written), else one answer per update, in order:
# its new entry id, or "" when it was already claimed (a Telegram redelivery, also one earlier in
# the same call). The webhook's one round trip for the updates it accepts (`UpdateIngress`):
# the switch, the dedup claims and the XADDs, for every request waiting at that moment. An XADD
# that fails releases its update's claim and fails the call: that update and the ones after it
# are not claimed (Telegram's redelivery queues them), those before it are queued (theirs is a
# duplicate), so no update is lost to a claim without an entry.
ENQUEUE_IF_ENABLED = Script("""
if redis.call('GET', KEYS[2]) ~= '1' then return 0 end
local out, at = {}, 2
for k = 3, #KEYS do
  local parts = tonumber(ARGV[at])
  if redis.call('SET', KEYS[k], '1', 'NX', 'EX', ARGV[1]) then
    local id = redis.pcall('XADD', KEYS[1], '*', unpack(ARGV, at + 1, at + parts))
    if type(id) == 'table' and id.err then
      redis.call('DEL', KEYS[k])
      return id
    end
    out[#out + 1] = id
  else
    out[#out + 1] = ''
  end
  at = at + parts + 1
end
return out
""", keys=("stream", "enabled", "claims*"), args=("ttl", "updates*"))
# Updates per script run at most: a burst larger than this takes more than one run.
MAX_INGRESS_BATCH = 64


# The contract's names of the streams (SPEC Parts A-E): what the routes, metrics, the send log,
# traces, the page and the CLI show. The key is internal (issue #35); with accounts, the account
# is a field of its own, never part of the name.
STREAM_NAMES = ("stalwart:jmap", "stalwart:telegram")


def stream_key(name: str, account_id: str = keys.DEFAULT_ACCOUNT) -> str | None:
    """The key of the stream the contract calls `name` (`stream_name`'s inverse), in
    `account_id` for the mailbox's stream (the chat stream is the deployment's); None for a
    name that is no stream's."""
    if name == STREAM_NAMES[0]:
        return keys.AccountKeys(account_id).stream_jmap
    return keys.STREAM_TELEGRAM if name == STREAM_NAMES[1] else None


def stream_name(key: str) -> str:
    """The contract's name of the stream at `key`: the key without its hash tag."""
    return key.split("}:", 1)[-1]


def stream_account(key: str) -> str | None:
    """The account whose mail stream is at `key` (`a:{<id>}:stalwart:jmap` → `<id>`); None for
    the chat's stream."""
    if not is_mail_stream(key):
        return None
    return key[len("a:{"):key.index("}:")]


def is_mail_stream(key: str) -> bool:
    """An account's mail stream (`a:{<id>}:stalwart:jmap`); the other is the chat's."""
    return key.startswith("a:{") and stream_name(key) == STREAM_NAMES[0]


class SwitchedOff(Exception):
    """The kill switch (`config:enabled`) is off: nothing was written."""


class UpdateIngress:
    """The webhook's queue: `enqueue_if_enabled` of the requests being served at one moment is
    one script run (`ENQUEUE_IF_ENABLED`), so Telegram's bursts cost one Redis round trip for
    many updates (issue #14). A lone update is sent at once: nothing waits for company.

    The run waits for a replica (`Script.replicated`, reference §7.18) before it answers: the
    webhook then answers Telegram, which never sends an answered update again, so an entry
    lost in a failover would lose the owner's words for good."""

    def __init__(self, redis: Redis) -> None:
        self._store = StreamStore(redis)
        self._batcher: Batcher[tuple[int, dict[str, str]], str | None] = Batcher(
            self._enqueue_replicated, MAX_INGRESS_BATCH)

    async def _enqueue_replicated(self, updates: list[tuple[int, dict[str, str]]],
                                  ) -> list[str | None]:
        return await self._store.enqueue_updates_if_enabled(updates, replicated=True)

    async def enqueue_if_enabled(self, update_id: int, fields: dict[str, str]) -> str | None:
        """The new entry's id, None for a redelivery; `SwitchedOff` (nothing written) or the
        `RedisError` of the run it took part in."""
        return await self._batcher.submit((update_id, fields))


# KEYS: dlq ({stream}:dlq), stream   ARGV: dlq_id (the DLQ entry), replay_field (`replay_of`)
# → the new stream id, or false when the DLQ entry is gone (replayed already).
# The new entry is the payload plus `replay_of` = the dead-lettered entry's id (`source_id`); a
# `replay_of` inside the payload (a replay dead-lettered again) is replaced by the newer one.
REPLAY = Script("""
local rows = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if #rows == 0 then return false end
local f = rows[1][2]
local payload, source
for i = 1, #f, 2 do
  if f[i] == 'payload' then payload = f[i + 1] end
  if f[i] == 'source_id' then source = f[i + 1] end
end
local fields = {}
if payload then
  for k, v in pairs(cjson.decode(payload)) do
    if k ~= ARGV[2] then fields[#fields + 1] = k; fields[#fields + 1] = tostring(v) end
  end
end
if #fields == 0 then redis.call('XDEL', KEYS[1], ARGV[1]); return false end
if source then fields[#fields + 1] = ARGV[2]; fields[#fields + 1] = source end
local id = redis.call('XADD', KEYS[2], '*', unpack(fields))
redis.call('XDEL', KEYS[1], ARGV[1])
return id
""", keys=("dlq", "stream"), args=("dlq_id", "replay_field"))


@dataclass(frozen=True)
class Entry:
    stream: str
    id: str
    fields: dict[str, str]

    @property
    def enqueued_ms(self) -> int:
        return int(self.id.split("-", 1)[0])


@dataclass(frozen=True)
class DlqEntry:
    id: str
    stream: str
    failure_class: str
    reason: str
    attempts: int
    failed_at: int

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "stream": stream_name(self.stream),
                "failure_class": self.failure_class, "reason": self.reason,
                "attempts": self.attempts, "failed_at": self.failed_at}


def _entries(stream: str, rows: list[Any]) -> list[Entry]:
    out = []
    for entry_id, fields in rows:
        if fields is None:  # deleted while pending (XCLAIM of a trimmed entry)
            continue
        out.append(Entry(stream, entry_id, dict(fields)))
    return out


def _replied(reply: Any) -> list[Entry]:
    """The entries of an XREADGROUP reply (nil: none)."""
    return [entry for stream, rows in reply or [] for entry in _entries(stream, rows)]


def _slot_groups(streams: tuple[str, ...]) -> list[tuple[str, ...]]:
    """`streams` grouped by cluster slot, in their order."""
    groups: dict[int, tuple[str, ...]] = {}
    for stream in streams:
        slot = key_slot(stream.encode())
        groups[slot] = (*groups.get(slot, ()), stream)
    return list(groups.values())


class StreamStore:
    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._raw = cast(Any, redis)  # redis-py's stubs are loose about stream replies

    # --- ingress ------------------------------------------------------------------------
    async def enqueue_updates_if_enabled(
        self, updates: list[tuple[int, dict[str, str]]], *, replicated: bool = False,
    ) -> list[str | None]:
        """Claim `dedup:tg:{update_id}` and append the entry, atomically, for each of `updates`
        (None for a duplicate), in order and in one round trip, with the switch checked once
        for all (`SwitchedOff`: nothing written). With `replicated`, then `WAIT` for a replica
        (`Script.replicated`): the webhook's; the poller's updates are kept by the offset's
        own `WAIT` after them (same slot, later)."""
        parts: list[str | int] = []
        for _update_id, fields in updates:
            parts.append(2 * len(fields))
            for item in fields.items():
                parts += item
        run = ENQUEUE_IF_ENABLED.replicated if replicated else ENQUEUE_IF_ENABLED.__call__
        result = await run(self.redis, keys={
            "stream": keys.STREAM_TELEGRAM, "enabled": keys.ENABLED,
            "claims": [keys.dedup_tg(u) for u, _ in updates],
        }, args={"ttl": keys.DEDUP_TTL_S, "updates": parts})
        if result == 0:
            raise SwitchedOff
        return [str(entry) if entry else None for entry in result]

    async def add(self, stream: str, fields: dict[str, str]) -> str:
        return str(await self.redis.xadd(stream, fields))  # type: ignore[arg-type]

    # --- consumer group -----------------------------------------------------------------
    async def ensure_groups(self, streams: Sequence[str] = keys.STREAMS) -> None:
        for stream in streams:
            try:
                await self.redis.xgroup_create(stream, keys.CONSUMER_GROUP, id="0", mkstream=True)
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    async def read_new(self, consumer: str, count: int, block_ms: int | None,
                       streams: Sequence[str] = keys.STREAMS) -> list[Entry]:
        """Up to `count` new entries of each of `streams`, waiting up to `block_ms` for one.
        One XREADGROUP when the streams share a slot (one server); on a Redis Cluster, where
        one command cannot name keys of two slots, `_read_per_slot`."""
        groups: list[tuple[str, ...]] = (
            _slot_groups(tuple(streams)) if is_cluster(self.redis) else [tuple(streams)])
        try:
            if len(groups) == 1:
                return await self._read(consumer, groups[0], count, block_ms)
            return await self._read_per_slot(consumer, groups, count, block_ms)
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            await self.ensure_groups(streams)
            return []

    async def _read(self, consumer: str, streams: tuple[str, ...], count: int,
                    block_ms: int | None) -> list[Entry]:
        return _replied(await self._raw.xreadgroup(
            keys.CONSUMER_GROUP, consumer, dict.fromkeys(streams, ">"), count=count,
            block=block_ms))

    async def _read_per_slot(self, consumer: str, groups: list[tuple[str, ...]], count: int,
                             block_ms: int | None) -> list[Entry]:
        """A cluster: each slot's streams without waiting, `count` shared, in turn; when none
        has an entry, a wait of `block_ms` on every slot at once (`cluster_wait`, reference
        §7.18)."""
        out: list[Entry] = []
        for group in groups:
            if len(out) < count:
                out += _replied(await read_now(self.redis, consumer, group, count - len(out)))
        if out or not block_ms:
            return out
        for reply in await wait_on_every_slot(self.redis, consumer, groups, count, block_ms):
            out += _replied(reply)
        return out

    async def claim(self, stream: str, consumer: str, ids: list[str]) -> list[Entry]:
        """Take over `ids` (whoever holds them) for `consumer`; trimmed entries are dropped."""
        if not ids:
            return []
        rows = await self._raw.xclaim(stream, keys.CONSUMER_GROUP, consumer, 0, ids)
        return _entries(stream, rows)

    async def autoclaim(self, stream: str, consumer: str, min_idle_ms: int,
                        count: int) -> list[Entry]:
        """XAUTOCLAIM; Redis 6.2 answers 2 elements and 7.0 answers 3: read the first two."""
        reply = await self._raw.execute_command(
            "XAUTOCLAIM", stream, keys.CONSUMER_GROUP, consumer, min_idle_ms, "0-0",
            "COUNT", count,
        )
        rows = reply[1] if reply else []
        return _entries(stream, [(r[0], None if r[1] is None else _pairs(r[1]))
                                 for r in rows if r])

    async def pending_of(self, stream: str, consumer: str, count: int = 100) -> list[str]:
        rows = await self.redis.xpending_range(
            stream, keys.CONSUMER_GROUP, min="-", max="+", count=count, consumername=consumer
        )
        return [str(r["message_id"]) for r in rows]

    async def idle_pending(self, stream: str, consumer: str, min_idle_ms: int,
                           count: int) -> list[str]:
        rows = await self.redis.xpending_range(
            stream, keys.CONSUMER_GROUP, min="-", max="+", count=count, consumername=consumer,
            idle=min_idle_ms,
        )
        return [str(r["message_id"]) for r in rows]

    async def consumers(self, stream: str) -> list[tuple[str, int]]:
        try:
            rows = await self.redis.xinfo_consumers(stream, keys.CONSUMER_GROUP)
        except ResponseError:
            return []
        return [(str(r["name"]), int(r["pending"])) for r in rows]

    async def remove_consumer(self, stream: str, consumer: str) -> None:
        await self.redis.xgroup_delconsumer(stream, keys.CONSUMER_GROUP, consumer)

    # --- liveness -----------------------------------------------------------------------
    async def beat(self, consumer: str, streams: list[str]) -> None:
        """One heartbeat per stream `consumer` reads, each in its stream's slot (§7.17), all
        in one round trip (on a cluster, one per node)."""
        now = str(int(time.time()))
        async with self.redis.pipeline(transaction=False) as pipe:
            for stream in streams:
                pipe.set(keys.worker_heartbeat(stream, consumer), now,
                         ex=keys.WORKER_HEARTBEAT_TTL_S)
            await pipe.execute()

    async def alive(self, stream: str, consumer: str) -> bool:
        return bool(await self.redis.exists(keys.worker_heartbeat(stream, consumer)))

    async def stop_beating(self, consumer: str, streams: list[str]) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            for stream in streams:  # one key per command: each stream's is in its own slot
                pipe.delete(keys.worker_heartbeat(stream, consumer))
            await pipe.execute()

    # --- trimming -----------------------------------------------------------------------
    async def trim(self, stream: str) -> None:
        """Drop entries the group no longer needs: below the oldest pending entry and the
        group's last delivered id. Approximate MINID (whole nodes only, never a needed entry),
        except on a stream that forgets its entries: there the trim is exact and takes every
        acked entry, the last delivered one included (an acked entry has its terminal record,
        §1.3.1). The scripts delete those entries already; this catches any acked before."""
        try:
            groups = await self.redis.xinfo_groups(stream)
        except ResponseError:
            return
        group = next((g for g in groups if g["name"] == keys.CONSUMER_GROUP), None)
        if group is None:
            return
        delivered = str(group["last-delivered-id"])
        if delivered in ("0-0", "0"):
            return
        exact = forgotten_when_finished(stream)
        floor = _next_id(delivered) if exact else delivered
        summary = await self.redis.xpending(stream, keys.CONSUMER_GROUP)
        if summary and summary.get("pending") and summary.get("min"):
            floor = min(floor, str(summary["min"]), key=_id_key)
        if exact:
            await self._raw.execute_command("XTRIM", stream, "MINID", floor)
        else:
            await self._raw.execute_command("XTRIM", stream, "MINID", "~", floor)

    # --- DLQ and stats ------------------------------------------------------------------
    async def dlq_list(self, stream: str, limit: int) -> list[DlqEntry]:
        rows = await self._raw.xrange(keys.dlq(stream), count=limit)
        return [_dlq_entry(stream, entry_id, fields) for entry_id, fields in rows]

    async def dlq_ids(self, stream: str) -> list[str]:
        rows = await self._raw.xrange(keys.dlq(stream))
        return [str(entry_id) for entry_id, _ in rows]

    async def replay(self, stream: str, dlq_id: str) -> str | None:
        """Put one DLQ entry back on `stream` as a new entry; its id, or None when gone.

        A dead letter of a stream that forgets its entries is refused and discarded (None):
        it has no text left to answer, and a reply to a days-old command is of little use.
        Discarding also clears DLQ entries written before the text was left out of them."""
        if forgotten_when_finished(stream):
            await self.redis.xdel(keys.dlq(stream), dlq_id)
            return None
        result = await REPLAY(self.redis, keys={"dlq": keys.dlq(stream), "stream": stream},
                              args={"dlq_id": dlq_id, "replay_field": REPLAY_OF})
        return str(result) if result else None

    async def stats(self, stream: str) -> dict[str, int]:
        """`length` (every entry the stream still holds, delivered ones included until the
        trim), `unread` (not read by the group yet: waiting for a worker), `pending` (read,
        not finished: being sent or waiting for its retry) and `dlq`."""
        length = await self.redis.xlen(stream)
        pending = 0
        try:
            summary = await self.redis.xpending(stream, keys.CONSUMER_GROUP)
            pending = int(summary.get("pending") or 0)
        except ResponseError:
            pass
        return {"length": int(length), "unread": await self._unread(stream, int(length)),
                "pending": pending, "dlq": int(await self.redis.xlen(keys.dlq(stream)))}

    async def _unread(self, stream: str, length: int) -> int:
        """Entries after the group's last-delivered-id: Redis 7's `lag` when it knows it,
        else counted (at most `UNREAD_COUNT_CAP`); every entry while there is no group yet."""
        try:
            groups = await self.redis.xinfo_groups(stream)
        except ResponseError:
            return length
        group = next((g for g in groups if g["name"] == keys.CONSUMER_GROUP), None)
        if group is None:
            return length
        lag = group.get("lag")
        if isinstance(lag, int):
            return lag
        after = f"({group['last-delivered-id']}"
        return len(await self._raw.xrange(stream, after, "+", count=UNREAD_COUNT_CAP))

    # --- trace (read only: `pipeline.trace`) ----------------------------------------------
    async def entry(self, stream: str, entry_id: str) -> Entry | None:
        """The entry, while it is still in `stream` (None once trimmed or deleted)."""
        rows = await self._raw.xrange(stream, entry_id, entry_id)
        found = _entries(stream, rows)
        return found[0] if found else None

    async def pending_entry(self, stream: str, entry_id: str) -> tuple[str, int, int] | None:
        """(consumer, idle ms, deliveries) while the group holds `entry_id` unacked."""
        try:
            rows = await self.redis.xpending_range(stream, keys.CONSUMER_GROUP, min=entry_id,
                                                   max=entry_id, count=1)
        except ResponseError:
            return None
        if not rows:
            return None
        row = rows[0]
        return (str(row["consumer"]), int(row["time_since_delivered"]),
                int(row["times_delivered"]))

    async def dlq_entry(self, stream: str, dlq_id: str) -> DlqEntry | None:
        """One DLQ entry, None when it is gone (replayed or discarded)."""
        rows = await self._raw.xrange(keys.dlq(stream), dlq_id, dlq_id)
        return _dlq_entry(stream, *rows[0]) if rows else None

    async def replay_of(self, stream: str, source_id: str, since_ms: int,
                        scan: int = 2000) -> str | None:
        """The id of the entry that replayed `source_id` (its `replay_of`), looking through at
        most `scan` entries added from `since_ms` on (None: not found there)."""
        rows = await self._raw.xrange(stream, f"{since_ms}-0", "+", count=scan)
        return next((str(entry_id) for entry_id, fields in rows
                     if fields and fields.get(REPLAY_OF) == source_id), None)


def _pairs(flat: Any) -> dict[str, str]:
    if isinstance(flat, dict):
        return flat
    return {str(flat[i]): str(flat[i + 1]) for i in range(0, len(flat), 2)}


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _next_id(entry_id: str) -> str:
    """The smallest stream id above `entry_id` (MINID keeps ids >= its argument)."""
    ms, seq = _id_key(entry_id)
    return f"{ms}-{seq + 1}" if seq < 2**64 - 1 else f"{ms + 1}-0"


def forgotten_when_finished(stream: str) -> bool:
    """Whether an entry of `stream` is deleted by the script that finishes it."""
    return stream in FORGET_WHEN_FINISHED


def _dlq_entry(stream: str, entry_id: str, fields: dict[str, str]) -> DlqEntry:
    return DlqEntry(
        id=entry_id, stream=stream, failure_class=fields.get("failure_class", "unknown"),
        reason=fields.get("reason", ""), attempts=int(fields.get("attempts", "0") or 0),
        failed_at=int(fields.get("failed_at", "0") or 0),
    )


def dlq_payload(stream: str, fields: dict[str, str]) -> str:
    """The DLQ copy of an entry: its fields but the private ones (the owner's text)."""
    private = PRIVATE_FIELDS.get(stream, frozenset())
    kept = {name: value for name, value in fields.items() if name not in private}
    return dump_json(kept)
