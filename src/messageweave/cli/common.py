"""What several commands share: the console, the `--data-dir` and `--account` options, loading
the settings printing a failure (exit code 1), the admin key of a data directory (`run` and
`service install` create it), the services of a configured instance, and the accounts."""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from redis.exceptions import RedisError
from rich.console import Console
from rich.markup import escape

from messageweave import runtime
from messageweave.config.account_service import AccountService, UnknownAccount
from messageweave.config.live import StoredConfigInvalid, StoreUnavailable
from messageweave.runtime import settings_from_data_dir
from messageweave.services import Services
from messageweave.settings import KEY_FILE, Settings
from messageweave.store.accounts import AccountStore
from messageweave.store.keys import DEFAULT_ACCOUNT
from messageweave.store.upgrade import upgrade_if_reachable

console = Console()

DataDirOption = Annotated[Path | None, typer.Option(
    help="The data directory of `messageweave run`: its embedded Redis and key are used when "
         "REDIS_URL / CONFIG_ENCRYPTION_KEY are unset (default: the one `run` uses).")]

AccountOption = Annotated[str, typer.Option(
    "--account", help="The account whose mailbox this acts on (see `messageweave accounts`).")]


def fail(detail: str, *, highlight: bool | None = None) -> NoReturn:
    """Print `fail <detail>` and exit with code 1."""
    console.print(f"[red]fail[/] {detail}", highlight=highlight)
    raise typer.Exit(1)


def load_settings(data_dir: Path | None) -> Settings:
    """The environment, completed from `data_dir` (see `runtime.settings_from_data_dir`); a
    command that needs all of it fails when something is missing."""
    settings = settings_from_data_dir(data_dir)
    if settings.missing:
        fail(f"environment: missing {', '.join(settings.missing)}")
    return settings


def load_or_create_key(data_dir: Path) -> tuple[str, bool]:
    """The admin key stored in `data_dir` (mode 0600), generating it on first use."""
    path = data_dir / KEY_FILE
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip(), False
    key = secrets.token_hex(32)
    with os.fdopen(fd, "w") as f:
        f.write(key + "\n")
    return key, True


@asynccontextmanager
async def stored_services(settings: Settings) -> AsyncIterator[Services]:
    """The instance's services (`runtime.build_services`) with the stored configuration loaded.
    `RuntimeError` when nothing is configured; `StoreUnavailable` / `StoredConfigInvalid` when
    the stored configuration cannot be read."""
    svc = runtime.build_services(settings)
    try:
        await upgrade_if_reachable(svc.redis)  # before any key is read (issue #35)
        _, cfg = await svc.config.read_stored()
        if cfg is None:
            raise RuntimeError("nothing configured yet: save a configuration first")
        await svc.config.refresh()
        yield svc
    finally:
        await runtime.close(svc)


def account_service(svc: Services) -> AccountService:
    return AccountService(svc.config, AccountStore(svc.redis), svc.settings.encryption_key)


def check_account(settings: Settings, account_id: str) -> None:
    """Exit 1 with a clear line unless `account_id` names an account (the rule of the routes'
    `?account=`: `AccountService.served`). `default` needs no look-up."""
    if account_id == DEFAULT_ACCOUNT:
        return
    named = escape(account_id)  # the operator's text, not markup
    try:
        asyncio.run(_served(settings, account_id))
    except UnknownAccount:
        fail(f"account {named}: no such account (see messageweave accounts)",
             highlight=False)
    except (RedisError, StoreUnavailable, StoredConfigInvalid, OSError) as exc:
        fail(f"{type(exc).__name__}: {exc}", highlight=False)


async def _served(settings: Settings, account_id: str) -> None:
    svc = runtime.build_services(settings)
    try:
        await account_service(svc).served(account_id)
    finally:
        await runtime.close(svc)
