"""Commands of many tasks in one round trip (issue #37): `together` queues one command for the
pipeline that goes out after the current turn of the event loop, with every other command
asked for in that turn, and returns its own reply.

An instance serving 200 accounts renewed 200 leases and polled 200 catch-up flags one round
trip each: ~110 round trips a second at idle, each ~95 µs of our CPU in redis-py (pool, packing,
a timeout, a wake-up), where a command in a pipeline costs ~8 µs. The loops that do such upkeep
wake on a shared grid (`on_grid`), so the commands of all accounts meet in one turn.

A reply is what the command alone would give (a Redis error of that command raises in its own
caller only); an error of the round trip (a connection lost) raises in every caller of it. A
caller cancelled meanwhile does not stop the others: the round trip is its own task. On a Redis
Cluster the pipeline sends each command to its key's node (redis-py's cluster pipeline), so a
command must name its keys in one slot, as everywhere (reference §1.0).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Any

from redis.asyncio.client import Pipeline

from messageweave.store.redis import Redis

Queue = Callable[[Pipeline], object]  # queues one command on the pipeline it is given


class _Turn:
    """The commands one Redis client was asked for in the current turn of the loop. It holds
    no reference to the client (`_TURNS` is keyed weakly on it): the client is handed in."""

    def __init__(self) -> None:
        self._queued: list[tuple[Queue, asyncio.Future[Any]]] = []
        self._sending: set[asyncio.Task[None]] = set()

    async def run(self, redis: Redis, queue: Queue) -> Any:
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[Any] = loop.create_future()
        if not self._queued:  # after every task woken in this turn queued its own
            loop.call_soon(self._send, redis)
        self._queued.append((queue, reply))
        return await reply

    def _send(self, redis: Redis) -> None:
        queued, self._queued = self._queued, []
        task = asyncio.ensure_future(self._round_trip(redis, queued))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    @staticmethod
    async def _round_trip(redis: Redis, queued: list[tuple[Queue, asyncio.Future[Any]]]
                          ) -> None:
        waiting = [(queue, reply) for queue, reply in queued if not reply.done()]
        try:
            async with redis.pipeline(transaction=False) as pipe:
                for queue, _ in waiting:
                    queue(pipe)
                replies = await pipe.execute(raise_on_error=False)
        except Exception as exc:  # the round trip failed: every caller of it learns why
            for _, reply in waiting:
                if not reply.done():
                    reply.set_exception(exc)
            return
        except BaseException:  # the round trip itself cancelled (the loop closing): theirs too
            for _, reply in waiting:
                reply.cancel()
            raise
        for (_, reply), value in zip(waiting, replies, strict=True):
            if reply.done():
                continue
            if isinstance(value, Exception):
                reply.set_exception(value)
            else:
                reply.set_result(value)


_TURNS: weakref.WeakKeyDictionary[Redis, _Turn] = weakref.WeakKeyDictionary()


async def together(redis: Redis, queue: Queue) -> Any:
    """The reply of the one command `queue` puts on a pipeline, sent with every other command
    asked for on `redis` in this turn of the event loop, in one round trip."""
    turn = _TURNS.get(redis)
    if turn is None:
        turn = _TURNS[redis] = _Turn()
    return await turn.run(redis, queue)


def on_grid(every_s: float) -> float:
    """Seconds until the next multiple of `every_s` on the event loop's clock, at least half
    of `every_s` away (so at most one and a half): loops that wait this long wake in the same
    turn, and their `together` commands share a round trip."""
    now = asyncio.get_running_loop().time()
    wait = every_s - now % every_s
    return wait if wait >= every_s / 2 else wait + every_s
