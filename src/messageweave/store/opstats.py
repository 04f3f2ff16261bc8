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


async def unknown_after_send(redis: Redis) -> int | None:
    """The pipeline's count of sends whose outcome is unknown, when the pipeline keeps one.

    The key is the pipeline's (`keys.DELIVERY_UNKNOWN`, a sorted set today); when it is not
    defined this is None and the metric is left out. Any Redis type is read as "how many": a
    counter or a collection's size.
    """
    key = getattr(keys, "DELIVERY_UNKNOWN", None)
    if not isinstance(key, str):
        return None
    kind = str(await redis.type(key))
    sizes = {"string": None, "list": redis.llen, "set": redis.scard, "zset": redis.zcard,
             "hash": redis.hlen, "stream": redis.xlen}
    if kind == "none":
        return 0
    if kind == "string":
        raw = await redis.get(key)
        try:
            return int(raw or 0)
        except ValueError:
            return None
    size = sizes.get(kind)
    return int(await size(key)) if size is not None else None
