"""Small asyncio helpers: background loops, `async with` for clients that own connections, a
batcher that turns concurrent calls into one, and the wakes a request handler gives a loop of
its own instance.

The bottom layer: nothing here imports from the rest of messageweave."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import secrets
import weakref
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

# How long a cancelled task may take to shut down gracefully before it is cancelled again.
GRACE_S = 5.0


def raise_if_cancelling() -> None:
    """Re-raise a cancellation that a library call swallowed.

    redis-py can turn a CancelledError that arrives mid-command into a ConnectionError (or
    swallow it); a loop that carries on after that would never stop. Loops call this in their
    error handlers and once per iteration.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def cancel(task: asyncio.Task[Any] | None, grace_s: float = GRACE_S) -> None:
    """Cancel a background task and wait until it has ended.

    The task gets `grace_s` to finish its own clean-up; after that the cancellation is repeated
    until it takes (one can be swallowed by a library call).
    """
    if task is None:
        return
    task.cancel()
    await asyncio.wait([task], timeout=grace_s)
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=0.5)
    with contextlib.suppress(asyncio.CancelledError):
        task.result()


async def every(poll_s: float, step: Callable[[], Awaitable[None]], log: logging.Logger,
                what: str) -> None:
    """Run `step` every `poll_s` seconds until cancelled. A failure of one step (a Redis or
    peer hiccup) is logged by class name and never stops the loop; a cancellation always does,
    also one a library call swallowed."""
    while True:
        try:
            await step()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise_if_cancelling()
            log.warning("%s failed: %s", what, type(exc).__name__)
        raise_if_cancelling()
        await asyncio.sleep(poll_s)


class AsyncClosing(abc.ABC):
    """A client that owns connections: `async with Client(...) as c:` calls its `aclose()` on
    the way out, also when the block raises."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Close the connections; the client is not used afterwards."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


Item = TypeVar("Item")
Result = TypeVar("Result")


class Batcher(Generic[Item, Result]):
    """Coalesces concurrent `submit` calls into calls of `run` with many items.

    An item submitted while no run is going is run at once (alone, or with what arrives in
    the same turn of the event loop); items submitted while a run is going wait for it to end
    and then go together, at most `max_items` a run. `run` answers one result per item, in
    order; when it raises, every item of that run gets the exception and the next run goes on.
    A submitter that is cancelled leaves its item in the run (it may still take effect)."""

    def __init__(self, run: Callable[[list[Item]], Awaitable[list[Result]]],
                 max_items: int) -> None:
        self._run = run
        self._max_items = max_items
        self._waiting: list[tuple[Item, asyncio.Future[Result]]] = []
        self._runner: asyncio.Task[None] | None = None

    async def submit(self, item: Item) -> Result:
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, future))
        if self._runner is None:
            self._runner = asyncio.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            while self._waiting:
                batch = self._waiting[:self._max_items]
                del self._waiting[:self._max_items]
                try:
                    results = await self._run([item for item, _ in batch])
                    if len(results) != len(batch):
                        raise RuntimeError(f"{len(results)} results for {len(batch)} items")
                except Exception as exc:  # each submitter of this run raises it
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                except BaseException:  # cancelled (shutdown): so are the submitters
                    for _, future in batch:
                        future.cancel()
                    raise
                for (_, future), result in zip(batch, results, strict=True):
                    if not future.done():
                        future.set_result(result)
        finally:
            self._runner = None
            for _, future in self._waiting:  # left only by a cancellation: nobody runs them
                future.cancel()
            self._waiting.clear()


_jitter = secrets.SystemRandom()


async def first_done(*tasks: asyncio.Task[Any]) -> None:
    """Wait until one of `tasks` is done, then cancel the others (`cancel`); the caller reads
    the results of those it needs."""
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            if not task.done():
                await cancel(task)


def jittered_backoff(failures: int, base_s: float, cap_s: float) -> float:
    """How long to wait after the `failures`-th failure in a row: full jitter over a doubling
    step, 0.5-1 × min(cap, base × 2^(failures-1)), so many instances never retry in step."""
    step = min(cap_s, base_s * 2 ** max(failures - 1, 0))
    return _jitter.uniform(step / 2, step)


class LocalWakes:
    """The events of one instance's background loops, found through an object its request
    handlers share with them (its Redis client): a handler wakes the loop at once, with no
    Redis round trip. Weak on both sides, so a closed instance (a test's second one) leaves
    nothing behind. Only a hint: a loop the wake misses acts at its own next time."""

    def __init__(self) -> None:
        self._events: weakref.WeakKeyDictionary[object, weakref.WeakSet[asyncio.Event]] = (
            weakref.WeakKeyDictionary())

    def watch(self, owner: object, event: asyncio.Event) -> None:
        """Have `wake(owner)` set `event` (held by its loop: weakly here)."""
        self._events.setdefault(owner, weakref.WeakSet()).add(event)

    def wake(self, owner: object, *, after: float = 0.0) -> None:
        """Set the events watching `owner`, `after` seconds from now."""
        events = list(self._events.get(owner, ()))
        if after <= 0:
            for event in events:
                event.set()
            return
        loop = asyncio.get_running_loop()
        for event in events:
            loop.call_later(after, event.set)
