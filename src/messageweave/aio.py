"""Small asyncio helpers for long-running background loops."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

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
