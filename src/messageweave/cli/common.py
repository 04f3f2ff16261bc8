"""What several commands share: the console, the `--data-dir` option, loading the settings
printing a failure (exit code 1), and the services of a configured instance."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console

from messageweave import runtime
from messageweave.runtime import settings_from_data_dir
from messageweave.services import Services
from messageweave.settings import Settings
from messageweave.store.upgrade import upgrade_if_reachable

console = Console()

DataDirOption = Annotated[Path | None, typer.Option(
    help="The data directory of `messageweave run`: its embedded Redis and key are used when "
         "REDIS_URL / CONFIG_ENCRYPTION_KEY are unset (default: the one `run` uses).")]


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
