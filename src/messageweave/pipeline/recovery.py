"""What the worker takes up again (reference §1.3.1, §7.17): the maintenance pass's and a cron
drain's recovery of entries that are pending but nobody works on.

- a consumer whose heartbeat on a stream is gone is dead there: its pending entries there are
  claimed at once and it is removed from the stream's group;
- entries whose backoff is over (`delivery:retry_due:{stream}`) are claimed and retried; with
  `hold` (the continuous worker) a dead consumer's entries whose backoff is not over are taken
  too, each to wait for it in its chat's lane (`not_before`);
- this process's own pending entries idle for `OWN_IDLE_MS` (e.g. after a Redis error) are
  retried unless this process is working on them (`active`); entries idle past the reference's
  threshold on a live but stuck consumer are taken over with XAUTOCLAIM (the fallback).

An idle stream (nothing pending, no retry due) needs none of that, and most of an instance's
streams are idle (one per account): each pass first asks every stream at once, in one round
trip, whether it has anything pending or due (`needing_recovery`, issue #37), and looks closer
only at those that do. The dead consumers of an idle stream hold nothing; they are removed on
the passes that look at every stream (`tidy`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from messageweave.pipeline.ledger import Ledger
from messageweave.services import Services
from messageweave.store import keys
from messageweave.store.redis import Redis
from messageweave.store.streams import Entry, StreamStore

log = logging.getLogger(__name__)

OWN_IDLE_MS = 10_000


def idle_threshold_ms(svc: Services) -> int:
    """The XAUTOCLAIM idle time for one entry, the stuck fallback (reference §7: delivery
    pipeline): twice what all of an entry's attempts may spend in the three peers' timeouts,
    kept within 5 min and 6 h."""
    o = svc.config.outbound
    per = (o.max_retries + 1) * (o.jmap_timeout_ms + o.telegram_timeout_ms + o.llm_timeout_ms) * 2
    return int(min(max(300_000, per), 21_600_000))


async def needing_recovery(redis: Redis, streams: Sequence[str]) -> set[str]:
    """Those of `streams` with an entry pending in the group or a retry due now, asked of all
    in one round trip (XPENDING's summary and a ZCOUNT each). A stream whose answer is an error
    (no group yet, a node away) counts as needing it: the closer look reports the error."""
    now_ms = int(time.time() * 1000)
    async with redis.pipeline(transaction=False) as pipe:
        for stream in streams:
            pipe.xpending(stream, keys.CONSUMER_GROUP)
            pipe.zcount(keys.retry_due(stream), "-inf", now_ms)
        replies = await pipe.execute(raise_on_error=False)
    out: set[str] = set()
    for n, stream in enumerate(streams):
        pending, due = replies[2 * n], replies[2 * n + 1]
        if (isinstance(pending, Exception) or isinstance(due, Exception)
                or int(pending["pending"]) > 0 or int(due) > 0):
            out.add(stream)
    return out


@dataclass
class Recovery:
    """One worker's recovery: `active` are the entries it works on or has taken (never
    reclaimed as stalled), `not_before` what a held entry waits for (Unix s), both the
    worker's own."""

    svc: Services
    streams: StreamStore
    ledger: Ledger
    consumer: str
    active: set[tuple[str, str]]
    not_before: dict[tuple[str, str], float]

    async def recoverable(self, streams: Sequence[str], limit: int, *, hold: bool = False,
                          room: Mapping[str, int] | None = None,
                          tidy: bool = True) -> list[Entry]:
        """Entries to (re)process now, oldest first in each stream (a chat's lane takes them
        in that order). With `room`, no more of a stream than it has room for (its share: a
        stream at its share is left for later). Without `tidy`, only the streams that have
        anything pending or due are looked at (`needing_recovery`)."""
        if not tidy:
            wanted = await needing_recovery(self.svc.redis, streams)
            streams = [stream for stream in streams if stream in wanted]
        unique: list[Entry] = []
        seen: set[tuple[str, str]] = set()
        for stream in streams:
            n = limit if room is None else min(limit, room.get(stream, 0))
            if n <= 0:
                continue
            out = await self._claim_dead(stream, n, hold)
            due = [i for i in await self.ledger.due(stream, n)
                   if (stream, i) not in self.active]
            claimed = await self.streams.claim(stream, self.consumer, due)
            for gone in set(due) - {e.id for e in claimed}:
                await self.ledger.forget_due(stream, gone)  # acked or trimmed meanwhile
            out += claimed
            out += await self._stalled(stream, n)
            for entry in sorted(out, key=_stream_order):
                key = (entry.stream, entry.id)
                if key not in seen and key not in self.active:
                    seen.add(key)
                    unique.append(entry)
        return unique

    async def _claim_dead(self, stream: str, limit: int, hold: bool = False) -> list[Entry]:
        out: list[Entry] = []
        for name, pending in await self.streams.consumers(stream):
            if name == self.consumer or await self.streams.alive(stream, name):
                continue
            if pending:
                ids = await self.streams.pending_of(stream, name, limit)
                claimed = await self.streams.claim(stream, self.consumer, ids)
                log.info("claimed %d entries of dead consumer on %s", len(ids), stream)
                out += await self._not_deferred(stream, claimed, hold)
                if len(ids) < pending:
                    continue
            await self.streams.remove_consumer(stream, name)
        return out

    async def _not_deferred(self, stream: str, entries: list[Entry],
                            hold: bool = False) -> list[Entry]:
        """Leave out entries whose backoff is not over yet (the due set brings them back);
        with `hold`, keep them, each to wait for its backoff in its lane (`not_before`)."""
        if not entries:
            return []
        waiting = await self.ledger.waiting(stream, [e.id for e in entries])
        if hold:
            for entry_id, due in waiting.items():
                self.not_before[(stream, entry_id)] = due
            return entries
        return [e for e in entries if e.id not in waiting]

    async def _stalled(self, stream: str, limit: int) -> list[Entry]:
        own = await self.streams.idle_pending(stream, self.consumer, OWN_IDLE_MS, limit)
        own = [i for i in own if (stream, i) not in self.active]
        entries = await self._not_deferred(
            stream, await self.streams.claim(stream, self.consumer, own))
        stuck = await self.streams.autoclaim(stream, self.consumer, idle_threshold_ms(self.svc),
                                             limit)
        return entries + await self._not_deferred(stream, stuck)


def _stream_order(entry: Entry) -> tuple[int, int]:
    """A stream id (`{ms}-{seq}`) as numbers: the order the stream holds its entries in."""
    ms, _, seq = entry.id.partition("-")
    try:
        return int(ms), int(seq or 0)
    except ValueError:
        return 0, 0

