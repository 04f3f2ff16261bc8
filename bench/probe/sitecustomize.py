"""Bench-only, not a part of the service (`bench.many_accounts`): with this directory first on
a process's PYTHONPATH and `MW_TASKS_FILE` set, `kill -USR1 <pid>` appends one JSON line to that
file: the process's asyncio tasks counted by coroutine, and its threads. The handler runs on
the main thread, where the event loop runs, between two of its callbacks."""

from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
import threading
from types import FrameType


def _dump(_signum: int, _frame: FrameType | None) -> None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    counts: collections.Counter[str] = collections.Counter()
    for task in asyncio.all_tasks(loop):
        coro = task.get_coro()
        counts[getattr(coro, "__qualname__", type(coro).__name__)] += 1
    with open(os.environ["MW_TASKS_FILE"], "a", encoding="utf-8") as f:
        f.write(json.dumps({"tasks": dict(counts.most_common()),
                            "threads": threading.active_count()}) + "\n")


if os.environ.get("MW_TASKS_FILE"):
    signal.signal(signal.SIGUSR1, _dump)
