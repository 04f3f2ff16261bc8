"""Read-only numbers about the pipeline for `/metrics`, `/debug/worker` and `diagnose` (the push
lifecycle's numbers come from `messageweave.mail.push.health`)."""

from __future__ import annotations

from dataclasses import dataclass

from messageweave.store import keys
from messageweave.store.redis import Redis
from messageweave.store.streams import StreamStore, stream_name


@dataclass(frozen=True)
class StreamStats:
    stream: str  # the contract's name (`stalwart:jmap`), as the metrics label it
    length: int  # every entry the stream still holds, delivered ones until the trim
    unread: int  # waiting for a worker
    pending: int  # read, not finished: being sent or waiting for its retry
    dlq: int

    @property
    def history(self) -> int:
        """Entries done (delivered, dead-lettered, skipped) that the stream keeps until the
        trim: what a backlog is not (issue #34)."""
        return max(0, self.length - self.unread - self.pending)


async def stream_stats(redis: Redis) -> list[StreamStats]:
    """Each stream's numbers, as `GET /api/delivery` counts them (`StreamStore.stats`)."""
    store = StreamStore(redis)
    out = []
    for stream in keys.STREAMS:
        s = await store.stats(stream)
        out.append(StreamStats(stream_name(stream), s["length"], s["unread"], s["pending"],
                               s["dlq"]))
    return out


async def reconcile_cursor(redis: Redis) -> str | None:
    value = await redis.get(keys.RECONCILE_CURSOR)
    return value if isinstance(value, str) else None


async def unknown_after_send(redis: Redis) -> int:
    """The sends whose outcome is unknown (`keys.DELIVERY_UNKNOWN`, the ledger's sorted set of
    `<stream>/<entry>/<resolution>`, kept `UNKNOWN_RETENTION_S`)."""
    return int(await redis.zcard(keys.DELIVERY_UNKNOWN))
