"""`messageweave reconcile` and `messageweave audit`: new-mail discovery and the gap auditor
from the command line (cron or by hand).

Both use the stored configuration and the same keys as the service, so they are safe to run
next to running instances. `reconcile` takes the same lock (a pass held elsewhere exits with
code 2) and, without `--once`, repeats passes until the mailbox is caught up, showing progress
for long walks. `audit` runs one gap audit and exits 3 when it found missing mail.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Annotated

import typer
from redis.exceptions import RedisError
from rich.progress import Progress as Bar
from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

from messageweave.cli.common import (
    AccountOption,
    DataDirOption,
    check_account,
    console,
    fail,
    load_settings,
    stored_services,
)
from messageweave.config.live import StoredConfigInvalid, StoreUnavailable
from messageweave.mail.errors import MailError
from messageweave.mail.gap_audit import TRIGGER_CLI, run_audit
from messageweave.mail.passes import AuditResult, Budget, Progress, ReconcileBusy, ReconcileError
from messageweave.services.acting import AccountNotLoaded, AccountPaused, acting_mailbox
from messageweave.settings import Settings
from messageweave.store.locks import LockLost

EXIT_BUSY = 2
EXIT_MISSING = 3


async def _passes(settings: Settings, account: str, once: bool, max_passes: int,
                  bar: Bar) -> Progress:
    async with stored_services(settings) as svc:
        mailbox = await acting_mailbox(svc, account, mailbox=True)
        cfg = mailbox.config.config  # the account's effective configuration
        if cfg is None:  # stored but not loadable on this process
            raise RuntimeError("nothing configured yet: save a configuration first")
        watch = await mailbox.watch()
        task = bar.add_task("reconcile", total=None)

        def show(p: Progress) -> None:
            bar.update(task, description=f"{p.phase}: {p.emails} emails seen, "
                                         f"{p.enqueued} new, {p.pages} pages")

        total = Progress()
        for _ in range(1 if once else max_passes):
            result = await watch.catch_up(svc.redis, cfg.notify_mailbox_roles,
                                          budget=Budget(), on_progress=show,
                                          digest_threshold=cfg.digest_threshold,
                                          names=mailbox.keys)
            total.emails += result.emails
            total.enqueued += result.enqueued
            total.pages += result.pages
            total.phase, total.complete = result.phase, result.complete
            total.rebaselined = total.rebaselined or result.rebaselined
            show(total)
            if result.complete:
                break
        return total


def reconcile_command(
    once: Annotated[bool, typer.Option("--once", help="One pass only (cron).")] = False,
    max_passes: Annotated[int, typer.Option(help="Stop after this many passes.")] = 1000,
    data_dir: DataDirOption = None,
    account: AccountOption = "default",
) -> None:
    """Find new mail now: replay Email/changes (or walk after a re-baseline) and enqueue it.

    Example: messageweave reconcile --once --data-dir .messageweave
    """
    settings = load_settings(data_dir)
    check_account(settings, account)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    try:
        with Bar(*columns, console=console, transient=True) as bar:
            result = asyncio.run(_passes(settings, account, once, max(1, max_passes), bar))
    except ReconcileBusy:
        console.print("[yellow]busy[/] another reconcile pass is running")
        raise typer.Exit(EXIT_BUSY) from None
    except (ReconcileError, LockLost, MailError, RuntimeError, StoreUnavailable,
            StoredConfigInvalid, OSError, AccountPaused, AccountNotLoaded) as exc:
        fail(f"{type(exc).__name__}: {exc}", highlight=False)
    state = "caught up" if result.complete else "not caught up yet (run again)"
    extra = ", re-baselined" if result.rebaselined else ""
    console.print(f"[green]ok[/] {result.phase}: {result.emails} emails seen, "
                  f"{result.enqueued} new enqueued{extra}; {state}", highlight=False)


async def _audit(settings: Settings, account: str) -> AuditResult:
    async with stored_services(settings) as svc:
        return await run_audit(await acting_mailbox(svc, account, mailbox=True), TRIGGER_CLI)


def audit_command(data_dir: DataDirOption = None, account: AccountOption = "default") -> None:
    """Check that no new mail of the audit window was left without its notification, and
    re-enqueue the missing ones. Exit 0: nothing missing; 3: missing mail found; 1: failure.

    Example: messageweave audit --data-dir .messageweave
    """
    settings = load_settings(data_dir)
    check_account(settings, account)
    try:
        result = asyncio.run(_audit(settings, account))
    except (MailError, RedisError, RuntimeError, StoreUnavailable, StoredConfigInvalid,
            OSError, AccountPaused, AccountNotLoaded) as exc:
        fail(f"{type(exc).__name__}: {exc}", highlight=False)
    if result.since is None:
        console.print("[green]ok[/] nothing to audit yet: no reconcile first run", highlight=False)
        return
    since = datetime.fromtimestamp(result.since, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    scope = f"mail received after {since}"
    if result.baseline_started:
        scope += " (baseline started now: mail from before is never audited)"
    left = (f"; {result.undiscovered} not reached by the reconcile yet"
            if result.undiscovered else "")
    cut = "; more mail than one audit lists (run again later)" if not result.complete else ""
    line = (f"{result.checked} checked, {result.missing} missing, {result.enqueued} re-enqueued "
            f"— {scope}{left}{cut}")
    if not result.missing:
        console.print(f"[green]ok[/] {line}", highlight=False)
        return
    console.print(f"[yellow]missing[/] {line}", highlight=False)
    for email_id in result.missing_ids:
        console.print(f"  {email_id}", highlight=False)
    raise typer.Exit(EXIT_MISSING)


def register(app: typer.Typer) -> None:
    app.command("reconcile")(reconcile_command)
    app.command("audit")(audit_command)
