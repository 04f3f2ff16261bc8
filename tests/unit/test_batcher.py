"""`aio.Batcher`, which turns the webhook's concurrent enqueues into one script run (issue #14).
Plain asyncio, no peer: `run` is an ordinary coroutine that records what it was given."""

from __future__ import annotations

import asyncio

import pytest

from messageweave.aio import Batcher


class Recorder:
    """A `run` that answers `item * 10` for each item and records every call; `hold` makes
    the next call wait until it is set."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []
        self.started = asyncio.Event()
        self.hold: asyncio.Event | None = None
        self.fail: list[Exception] = []  # raised by the next calls, in order

    async def __call__(self, items: list[int]) -> list[int]:
        self.calls.append(items)
        self.started.set()
        if self.hold is not None:
            hold, self.hold = self.hold, None
            await hold.wait()
        if self.fail:
            raise self.fail.pop(0)
        return [item * 10 for item in items]


async def _held_first_run() -> tuple[Recorder, asyncio.Event, Batcher[int, int],
                                    asyncio.Task[int]]:
    """A batcher whose first run (of item 1) is under way and held until the event is set."""
    run = Recorder()
    run.hold = hold = asyncio.Event()
    batcher = Batcher(run, 8)
    first = asyncio.create_task(batcher.submit(1))
    await run.started.wait()
    return run, hold, batcher, first


async def test_a_lone_item_runs_at_once() -> None:
    """Catches a batcher that waits for company (a timer, a minimum size): a quiet webhook's
    update must be queued as soon as it arrives."""
    run = Recorder()
    assert await asyncio.wait_for(Batcher(run, 8).submit(3), 1) == 30
    assert run.calls == [[3]]


async def test_items_that_arrive_during_a_run_go_together_in_the_next() -> None:
    """Catches one round trip per item: what arrives while a run is going is one run after."""
    run, hold, batcher, first = await _held_first_run()
    rest = [asyncio.create_task(batcher.submit(n)) for n in range(2, 7)]
    await asyncio.sleep(0)
    hold.set()
    assert await asyncio.gather(first, *rest) == [10, 20, 30, 40, 50, 60]
    assert run.calls == [[1], [2, 3, 4, 5, 6]]


async def test_a_run_takes_at_most_max_items() -> None:
    run = Recorder()
    batcher = Batcher(run, 4)
    results = await asyncio.gather(*(batcher.submit(n) for n in range(10)))
    assert results == [n * 10 for n in range(10)]
    assert run.calls == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


async def test_a_failed_run_fails_its_own_items_only() -> None:
    """Catches a failure that leaves submitters hanging or that stops the batcher: every item
    of the failed run raises its error, and the items after it are run as usual."""
    run = Recorder()
    run.fail = [ConnectionError("redis went away")]
    batcher = Batcher(run, 2)
    outcomes = await asyncio.gather(*(batcher.submit(n) for n in range(4)),
                                    return_exceptions=True)
    assert [type(o) for o in outcomes[:2]] == [ConnectionError, ConnectionError]
    assert outcomes[2:] == [20, 30]
    assert await batcher.submit(5) == 50


async def test_a_run_that_answers_the_wrong_number_of_results_fails_its_items() -> None:
    """Catches results handed to the wrong submitters when `run` drops or adds one."""

    async def short(items: list[int]) -> list[int]:
        return items[1:]

    batcher = Batcher(short, 8)
    outcomes = await asyncio.gather(*(batcher.submit(n) for n in range(3)),
                                    return_exceptions=True)
    assert all(isinstance(o, RuntimeError) for o in outcomes)


async def test_a_cancelled_submitter_leaves_the_others_their_results() -> None:
    """A client that hangs up mid-request must not take the other requests of its run down."""
    run, hold, batcher, first = await _held_first_run()
    leaving, staying = (asyncio.create_task(batcher.submit(n)) for n in (2, 3))
    await asyncio.sleep(0)
    leaving.cancel()
    hold.set()
    assert await asyncio.gather(first, staying) == [10, 30]
    assert leaving.cancelled()
    assert run.calls == [[1], [2, 3]]  # the item was run: its effect may still happen


async def test_a_runner_cancelled_at_shutdown_cancels_every_waiting_submitter() -> None:
    """Catches submitters left waiting forever when the loop's tasks are cancelled on the way
    out (the run going and the items behind it)."""
    _run, _hold, batcher, first = await _held_first_run()
    behind = asyncio.create_task(batcher.submit(2))
    await asyncio.sleep(0)
    runner = batcher._runner
    assert runner is not None
    runner.cancel()
    for task in (first, behind):
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 1)
    assert await batcher.submit(4) == 40  # a new runner starts for the next item
