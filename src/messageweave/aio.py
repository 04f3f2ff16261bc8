"""Small asyncio helpers: background loops, and `async with` for clients that own connections.

The bottom layer: nothing here imports from the rest of messageweave."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Self

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
