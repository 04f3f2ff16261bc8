"""`messageweave upgrade`: the in-place upgrade of issue #35 (`messageweave.store.upgrade`) on
its own, printing what it moved. Every start does the same; this is for the operator who wants
to see it, or to do it before starting."""

from __future__ import annotations

import asyncio

import typer

from messageweave.cli.common import DataDirOption, console, fail
from messageweave.runtime import settings_from_data_dir
from messageweave.store.redis import connect
from messageweave.store.upgrade import CURRENT, UNREACHABLE, Moved
from messageweave.store.upgrade import upgrade as upgrade_store


async def _upgrade(redis_url: str) -> Moved:
    redis = connect(redis_url)
    try:
        return await upgrade_store(redis)
    finally:
        await redis.aclose()


def upgrade(data_dir: DataDirOption = None) -> None:
    """Move the data of a release before issue #35 to the current key names (every start does
    it too); print each key moved, old -> new. Run again, it moves nothing.

    Example: messageweave upgrade --data-dir .messageweave
    """
    redis_url = settings_from_data_dir(data_dir).redis_url
    if not redis_url:
        fail("environment: missing REDIS_URL")
    try:
        moved = asyncio.run(_upgrade(redis_url))
    except UNREACHABLE as exc:
        fail(f"redis unreachable ({type(exc).__name__})")
    for old, new in moved:
        console.print(f"{old} -> {new}", highlight=False, markup=False)
    console.print(f"[green]ok[/] {len(moved) or 'nothing left'} moved; data format {CURRENT}")


def register(app: typer.Typer) -> None:
    app.command()(upgrade)
