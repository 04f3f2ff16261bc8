"""`messageweave drain` and `messageweave dlq`: the pipeline from the command line.

Both read the environment like `serve` (REDIS_URL, CONFIG_ENCRYPTION_KEY), completed from the
data directory of `messageweave run` (`--data-dir`) when it lacks them, and load the stored
business configuration, so they work next to (or instead of) running instances.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated

import typer
from redis.exceptions import RedisError

from messageweave import runtime
from messageweave.aio import cancel
from messageweave.cli.common import AccountOption, DataDirOption, check_account, load_settings
from messageweave.pipeline import dlq
from messageweave.pipeline.worker import Worker
from messageweave.services import Services
from messageweave.store import keys
from messageweave.store.keys import AccountKeys
from messageweave.store.streams import STREAM_NAMES, stream_key

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

dlq_app = typer.Typer(help="List and replay dead-lettered events.", no_args_is_help=True)


@asynccontextmanager
async def _services(data_dir: Path | None) -> AsyncIterator[Services]:
    async with runtime.running(load_settings(data_dir)) as svc:
        yield svc


async def _drain(loop: bool, batch: int, data_dir: Path | None) -> None:
    async with _services(data_dir) as svc:
        if loop:
            await _run_until_stopped(svc)
            return
        worker = Worker(svc)
        try:
            result = await worker.drain_once(batch)
        finally:
            # Done: whatever is left pending (a retry, a busy entry) is claimable at once.
            with contextlib.suppress(RedisError, OSError):
                await worker.stop_beating()
        typer.echo(json.dumps({"processed": result.processed, "outcomes": result.outcomes}))


async def _run_until_stopped(svc: Services) -> None:
    """The continuous worker until SIGINT or SIGTERM, then a clean stop (in-flight entries
    released, heartbeat dropped).

    Both signals get our own handler that sets an event: a process started in the background
    by a non-interactive shell inherits SIGINT as *ignored*, so Python's Ctrl-C handling (and
    asyncio.run's) never runs there and a SIGINT would otherwise be lost (issue #11)."""
    stop = asyncio.Event()
    running = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        running.add_signal_handler(sig, stop.set)
    reload = asyncio.create_task(svc.run_reload_loop(), name="config-reload")
    worker = asyncio.create_task(Worker(svc).run(), name="worker")
    stopped = asyncio.create_task(stop.wait(), name="stop-signal")
    try:
        await asyncio.wait([worker, stopped], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for sig in STOP_SIGNALS:
            running.remove_signal_handler(sig)
        await cancel(worker)
        await cancel(stopped)
        await cancel(reload)


def drain(
    once: Annotated[bool, typer.Option("--once", help="Drain one batch per stream and exit.")]
    = False,
    loop: Annotated[bool, typer.Option("--loop", help="Run the continuous worker.")] = False,
    batch: Annotated[int, typer.Option(help="Entries per stream for --once (max 10).")] = 10,
    data_dir: DataDirOption = None,
) -> None:
    """Deliver queued events (for cron-driven deployments, or a dedicated worker process).

    Example: messageweave drain --once --data-dir .messageweave
    """
    if once == loop:
        raise typer.BadParameter("give exactly one of --once or --loop")
    try:
        asyncio.run(_drain(loop, batch, data_dir))
    except KeyboardInterrupt:
        pass


def _stream(name: str, account: str) -> str:
    """The stream key named by its contract's name (`stalwart:jmap`: `account`'s)."""
    stream = stream_key(name, account)
    if stream is None:
        raise typer.BadParameter(f"stream must be one of {', '.join(STREAM_NAMES)}")
    return stream


@dlq_app.command("list")
def dlq_list(
    stream: Annotated[str | None, typer.Option(help="stalwart:jmap or stalwart:telegram")]
    = None,
    limit: Annotated[int, typer.Option(min=1, max=dlq.MAX_DLQ_LIMIT)] = 50,
    data_dir: DataDirOption = None,
    account: AccountOption = "default",
) -> None:
    """Print dead-lettered events as JSON lines (id, stream, class, reason, attempts, time).

    Example: messageweave dlq list --stream stalwart:telegram --limit 10
    """
    check_account(load_settings(data_dir), account)
    mine = AccountKeys(account).stream_jmap  # `default`'s list has the chat stream's too
    streams = [mine, *([keys.STREAM_TELEGRAM] if account == keys.DEFAULT_ACCOUNT else [])] \
        if stream is None else [_stream(stream, account)]

    async def main() -> None:
        async with _services(data_dir) as svc:
            for entry in await dlq.dlq_entries(svc.redis, streams, limit):
                typer.echo(json.dumps(entry.to_json(), ensure_ascii=False))

    asyncio.run(main())


@dlq_app.command("replay")
def dlq_replay(
    stream: Annotated[str, typer.Argument(help="stalwart:jmap or stalwart:telegram")],
    ids: Annotated[list[str] | None, typer.Argument(help="DLQ entry ids (default: all)")]
    = None,
    data_dir: DataDirOption = None,
    account: AccountOption = "default",
) -> None:
    """Put dead-lettered events back on their stream.

    Example: messageweave dlq replay stalwart:telegram 1718000000000-0
    """
    check_account(load_settings(data_dir), account)
    name = _stream(stream, account)

    async def main() -> None:
        async with _services(data_dir) as svc:
            replayed = await dlq.replay(svc.redis, name, ids or None)
            typer.echo(json.dumps({"replayed": replayed}))

    asyncio.run(main())


def register(app: typer.Typer) -> None:
    app.command()(drain)
    app.add_typer(dlq_app, name="dlq")
