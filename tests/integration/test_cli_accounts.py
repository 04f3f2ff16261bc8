"""The operator commands' `--account` and `messageweave accounts` (issue #35) as an operator
runs them: subprocesses against the stored configuration and the real Redis."""

from __future__ import annotations

import asyncio
import os
import subprocess

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.store import keys
from tests.helpers import ADMIN_KEY, console_script
from tests.integration.test_accounts import FAMILY_SECRET, with_family

ONE_MAILBOX_COMMANDS = [["reconcile", "--once"], ["audit"], ["dlq", "list"],
                        ["dlq", "replay", "stalwart:jmap"], ["trace", "Invoice"]]


async def run_cli(redis_url: str, *args: str, columns: int = 200
                  ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REDIS_URL": redis_url, "CONFIG_ENCRYPTION_KEY": ADMIN_KEY,
           "COLUMNS": str(columns)}
    return await asyncio.to_thread(
        subprocess.run, [console_script("messageweave"), *args],
        env=env, capture_output=True, text=True, timeout=60,
    )


async def _dead_letter(redis_client: aioredis.Redis) -> str:
    """One dead-lettered mail of the default account, which a command pointed at another
    account must leave where it is."""
    entry: str = await redis_client.xadd(keys.dlq(keys.STREAM_JMAP), {"email_id": "M-default"})
    return entry


@pytest.mark.parametrize("command", ONE_MAILBOX_COMMANDS, ids=" ".join)
async def test_a_command_for_another_account_never_touches_the_default_account(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, embedded_redis_url: str,
    command: list[str],
) -> None:
    """Catches `--account family` acting on the default account's mailbox or keys, or refused
    as "not served yet" although the runtime serves every account: the default account's dead
    letter stays where it is and is never listed. family's mail server is a closed port here,
    so the commands that need it fail naming the error (exit 1); the others answer from
    family's keys (tests/integration/accounts/test_mailbox_actions.py has them with mail)."""
    await with_family(client)
    entry = await _dead_letter(redis_client)
    done = await run_cli(embedded_redis_url, *command, "--account", "family")
    needs_mail = command[0] in ("reconcile", "audit", "trace")
    assert done.returncode == (1 if needs_mail else 0), done.stdout + done.stderr
    assert "not served" not in done.stdout and entry not in done.stdout, done.stdout
    if needs_mail:
        assert "fail Jmap" in done.stdout, done.stdout
    assert await redis_client.xlen(keys.dlq(keys.STREAM_JMAP)) == 1
    assert await redis_client.xlen(keys.STREAM_JMAP) == 0
    assert FAMILY_SECRET not in done.stdout + done.stderr


@pytest.mark.parametrize("command", ONE_MAILBOX_COMMANDS, ids=" ".join)
async def test_a_command_for_an_unknown_account_exits_1_naming_it(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, embedded_redis_url: str,
    command: list[str],
) -> None:
    """Catches a mistyped `--account` that silently acts on the default account."""
    await with_family(client)
    await _dead_letter(redis_client)
    done = await run_cli(embedded_redis_url, *command, "--account", "famliy")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "account famliy: no such account" in done.stdout, done.stdout
    assert await redis_client.xlen(keys.dlq(keys.STREAM_JMAP)) == 1


async def test_the_default_account_is_what_the_commands_act_on_without_account(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, embedded_redis_url: str,
) -> None:
    """Catches `--account default` (or none) refused or acting elsewhere: the default account's
    dead letters are listed either way."""
    await with_family(client)
    entry = await _dead_letter(redis_client)
    for extra in ([], ["--account", "default"]):
        listed = await run_cli(embedded_redis_url, "dlq", "list", "--stream", "stalwart:jmap",
                               *extra)
        assert listed.returncode == 0, listed.stdout + listed.stderr
        assert entry in listed.stdout


async def test_accounts_lists_each_account_with_its_name_and_state(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, embedded_redis_url: str,
) -> None:
    """Catches `messageweave accounts` missing an account, showing a paused one as enabled,
    reading a name as console markup, cutting a long name over two lines on a narrow terminal,
    or printing an account's mail password."""
    admin = await with_family(client, name="[red]Family[/red] " + "x" * 40)
    paused = await client.put("/api/accounts/family/enabled", headers=admin,
                              json={"enabled": False})
    assert paused.status_code == 200, paused.text
    listed = await run_cli(embedded_redis_url, "accounts", columns=60)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    lines = [line.split(None, 2) for line in listed.stdout.splitlines()]
    assert lines == [["default", "enabled", "default"],
                     ["family", "paused", "[red]Family[/red] " + "x" * 40]], listed.stdout
    assert FAMILY_SECRET not in listed.stdout + listed.stderr


async def test_a_paused_account_refuses_the_commands_that_need_its_mail_server(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, embedded_redis_url: str,
) -> None:
    """Catches a command that connects to a paused account's mail server (a paused account opens
    no connection), or refuses it without saying it is paused; its dead letters stay listable."""
    admin = await with_family(client)
    paused = await client.put("/api/accounts/family/enabled", headers=admin,
                              json={"enabled": False})
    assert paused.status_code == 200, paused.text
    for command in (["reconcile", "--once"], ["audit"], ["trace", "Invoice"]):
        done = await run_cli(embedded_redis_url, *command, "--account", "family")
        assert done.returncode == 1, done.stdout + done.stderr
        assert "account family is paused" in done.stdout, done.stdout
    listed = await run_cli(embedded_redis_url, "dlq", "list", "--account", "family")
    assert listed.returncode == 0, listed.stdout + listed.stderr
