"""The dead letters of a stream, for the delivery routes and the CLI (reference §1.3): listed,
and replayed as new entries."""

from __future__ import annotations

from messageweave.store.redis import Redis
from messageweave.store.streams import DlqEntry, StreamStore

MAX_DLQ_LIMIT = 500


async def dlq_entries(redis: Redis, streams: list[str], limit: int) -> list[DlqEntry]:
    store = StreamStore(redis)
    out: list[DlqEntry] = []
    for stream in streams:
        out += await store.dlq_list(stream, limit - len(out))
        if len(out) >= limit:
            break
    return out


async def replay(redis: Redis, stream: str, ids: list[str] | None) -> int:
    """Put DLQ entries back on their stream (all of them when `ids` is None): each becomes a
    new entry (new id, its own ledger) whose `replay_of` names the dead-lettered entry."""
    store = StreamStore(redis)
    targets = ids if ids is not None else await store.dlq_ids(stream)
    replayed = 0
    for dlq_id in targets:
        if await store.replay(stream, dlq_id):
            replayed += 1
    return replayed
