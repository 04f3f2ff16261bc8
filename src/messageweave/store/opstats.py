"""Read-only numbers about the pipeline for `/metrics`, `/debug/worker` and `diagnose` (the push
lifecycle's numbers come from `messageweave.mail.push.health`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from redis.exceptions import ResponseError

from messageweave.store import keys
from messageweave.store.redis import Redis
from messageweave.store.streams import StreamStore, stream_account, stream_name
from messageweave.store.waiting import every_stream


@dataclass(frozen=True)
class StreamStats:
    stream: str  # the contract's name (`stalwart:jmap`), as the metrics label it
    length: int  # every entry the stream still holds, delivered ones until the trim
    unread: int  # waiting for a worker
    pending: int  # read, not finished: being sent or waiting for its retry
    dlq: int
    account: str | None = None  # a mail stream's account; None for the chat's stream

    @property
    def history(self) -> int:
        """Entries done (delivered, dead-lettered, skipped) that the stream keeps until the
        trim: what a backlog is not (issue #34)."""
        return max(0, self.length - self.unread - self.pending)


async def stream_stats(redis: Redis) -> list[StreamStats]:
    """Each stream's numbers, as `GET /api/delivery` counts them (`StreamStore.stats`): every
    account's mail stream (`every_stream`, paused accounts' included) and the chat stream."""
    store = StreamStore(redis)
    out = []
    for stream in await every_stream(redis):
        s = await store.stats(stream)
        out.append(StreamStats(stream_name(stream), s["length"], s["unread"], s["pending"],
                               s["dlq"], stream_account(stream)))
    return out


@dataclass(frozen=True)
class StreamGauges:
    """One stream's `/metrics` gauges (reference §8)."""

    stream: str  # the contract's name (`stalwart:jmap`)
    account: str | None  # the account of a mail stream; None for the chat's stream
    length: int
    pending: int
    dlq: int


async def stream_gauges(redis: Redis) -> list[StreamGauges]:
    """Every account's mail stream (`store.waiting.every_stream`: paused accounts' included,
    their entries wait for the resume) and the chat stream, each its `XLEN`, its group's
    `XPENDING` count and its dead letters' `XLEN`: the accounts' index, then one pipelined
    round trip of three O(1) reads per stream, however many accounts there are."""
    streams = await every_stream(redis)
    async with redis.pipeline(transaction=False) as pipe:
        for stream in streams:
            pipe.xlen(stream)
            pipe.xpending(stream, keys.CONSUMER_GROUP)
            pipe.xlen(keys.dlq(stream))
        replies = await pipe.execute(raise_on_error=False)
    out = []
    for n, stream in enumerate(streams):
        length, summary, dlq = replies[3 * n:3 * n + 3]
        out.append(StreamGauges(stream_name(stream), stream_account(stream), _count(length),
                                _pending(summary), _count(dlq)))
    return out


def _count(reply: object) -> int:
    if isinstance(reply, Exception):
        raise reply
    return int(cast(int, reply))


def _pending(summary: object) -> int:
    """`XPENDING`'s count; 0 while the stream has no group (nothing was read), as
    `StreamStore.stats` counts it."""
    if isinstance(summary, ResponseError):
        return 0
    if isinstance(summary, Exception):
        raise summary
    return int(cast(dict[str, int], summary)["pending"] or 0)


async def reconcile_cursor(redis: Redis) -> str | None:
    value = await redis.get(keys.RECONCILE_CURSOR)
    return value if isinstance(value, str) else None


async def unknown_after_send(redis: Redis) -> int:
    """The sends whose outcome is unknown (`keys.DELIVERY_UNKNOWN`, the ledger's sorted set of
    `<stream>/<entry>/<resolution>`, kept `UNKNOWN_RETENTION_S`)."""
    return int(await redis.zcard(keys.DELIVERY_UNKNOWN))


async def delivery_status(redis: Redis,
                          streams: Sequence[str] = keys.STREAMS) -> dict[str, Any]:
    """The counts of `streams` (an account's mail stream and the chat stream), by their
    contract's names; the unknown-after-send count is the deployment's."""
    store = StreamStore(redis)
    return {
        "streams": {stream_name(stream): await store.stats(stream) for stream in streams},
        "unknown_after_send": await unknown_after_send(redis),
    }
