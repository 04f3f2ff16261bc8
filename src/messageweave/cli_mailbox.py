"""`messageweave reconcile`: run reconcile passes from the command line (cron or by hand).

It uses the stored configuration and the same lock, cursor and queue as the service, so it is
safe to run next to running instances (a pass held elsewhere exits with code 2). Without
`--once` it repeats passes until the mailbox is caught up, showing progress for long walks.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import Progress as Bar
from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

from messageweave.config.runtime import new_jmap_client
from messageweave.config.service import ConfigService, StoredConfigInvalid, StoreUnavailable
from messageweave.mail.jmap import JmapError
from messageweave.mail.reconcile import Budget, Progress, ReconcileBusy, ReconcileError, reconcile
from messageweave.settings import Settings, from_env
from messageweave.store.redis import connect
from messageweave.store.state import ConfigStore

console = Console()
EXIT_BUSY = 2


async def _passes(settings: Settings, once: bool, max_passes: int, bar: Bar) -> Progress:
    redis = connect(settings.redis_url)
    try:
        service = ConfigService(ConfigStore(redis), settings.encryption_key)
        _, cfg = await service.read_stored()
        if cfg is None:
            raise RuntimeError("nothing configured yet: save a configuration first")
        outbound = await service.read_outbound()
        task = bar.add_task("reconcile", total=None)

        def show(p: Progress) -> None:
            bar.update(task, description=f"{p.phase}: {p.emails} emails seen, "
                                         f"{p.enqueued} new, {p.pages} pages")

        async with new_jmap_client(cfg, outbound) as client:
            total = Progress()
            for _ in range(1 if once else max_passes):
                result = await reconcile(redis, client, cfg.notify_mailbox_roles,
                                         budget=Budget(), on_progress=show)
                total.emails += result.emails
                total.enqueued += result.enqueued
                total.pages += result.pages
                total.phase, total.complete = result.phase, result.complete
                total.rebaselined = total.rebaselined or result.rebaselined
                show(total)
                if result.complete:
                    break
            return total
    finally:
        await redis.aclose()


def reconcile_command(
    once: Annotated[bool, typer.Option("--once", help="One pass only (cron).")] = False,
    max_passes: Annotated[int, typer.Option(help="Stop after this many passes.")] = 1000,
) -> None:
    """Find new mail now: replay Email/changes (or walk after a re-baseline) and enqueue it."""
    settings = from_env()
    if settings.missing:
        console.print(f"[red]fail[/] environment: missing {', '.join(settings.missing)}")
        raise typer.Exit(1)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    try:
        with Bar(*columns, console=console, transient=True) as bar:
            result = asyncio.run(_passes(settings, once, max(1, max_passes), bar))
    except ReconcileBusy:
        console.print("[yellow]busy[/] another reconcile pass is running")
        raise typer.Exit(EXIT_BUSY) from None
    except (ReconcileError, JmapError, RuntimeError, StoreUnavailable, StoredConfigInvalid,
            OSError) as exc:
        console.print(f"[red]fail[/] {type(exc).__name__}: {exc}", highlight=False)
        raise typer.Exit(1) from None
    state = "caught up" if result.complete else "not caught up yet (run again)"
    extra = ", re-baselined" if result.rebaselined else ""
    console.print(f"[green]ok[/] {result.phase}: {result.emails} emails seen, "
                  f"{result.enqueued} new enqueued{extra}; {state}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("reconcile")(reconcile_command)
