"""`messageweave accounts`: the accounts of this deployment (issue #35, SPEC G.1), one line
each: id, enabled or paused, name. The operator commands that act on one mailbox take one of
these ids as `--account`."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

import typer
from redis.exceptions import RedisError
from rich.markup import escape

from messageweave import runtime
from messageweave.cli.common import DataDirOption, account_service, console, fail, load_settings
from messageweave.config.accounts import Account
from messageweave.config.live import StoredConfigInvalid, StoreUnavailable
from messageweave.settings import Settings


async def _every(settings: Settings) -> list[Account]:
    svc = runtime.build_services(settings)
    try:
        return await account_service(svc).every()
    finally:
        await runtime.close(svc)


def accounts_command(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
    data_dir: DataDirOption = None,
) -> None:
    """List the accounts: id, enabled or paused, name (none before a configuration is saved).

    Example: messageweave accounts --data-dir .messageweave
    """
    settings = load_settings(data_dir)
    try:
        found = asyncio.run(_every(settings))
    except (RedisError, StoreUnavailable, StoredConfigInvalid, OSError) as exc:
        fail(f"{type(exc).__name__}: {exc}", highlight=False)
    if not found:
        console.print("no account yet: save a configuration first", highlight=False)
    for account in found:
        if as_json:
            typer.echo(json.dumps({"id": account.id, "name": account.name,
                                   "enabled": account.enabled}, ensure_ascii=False))
            continue
        state = "[green]enabled[/]" if account.enabled else "[yellow]paused[/]"
        # A name is the admin's (or the owner's) text: printed, never read as markup.
        console.print(f"{account.id:<32} {state:<18} {escape(account.name)}", highlight=False,
                      soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("accounts")(accounts_command)
