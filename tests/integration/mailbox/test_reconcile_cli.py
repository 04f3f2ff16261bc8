"""`messageweave reconcile` as an operator runs it, against the stored configuration, the real
Redis and the real Cyrus."""

from __future__ import annotations

import asyncio
import os
import subprocess

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.store.reconcile_state import reconcile_lock
from tests.helpers import ADMIN_KEY, FreshUser, configure, console_script, enqueued, mailbox_wire
from tests.peers.cyrus import CyrusServer


async def run_cli(
    redis_url: str, cyrus: CyrusServer, *args: str
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REDIS_URL": redis_url, "CONFIG_ENCRYPTION_KEY": ADMIN_KEY,
           "SSL_CERT_FILE": str(cyrus.ca_file), "COLUMNS": "200"}
    return await asyncio.to_thread(
        subprocess.run, [console_script("messageweave"), "reconcile", *args],
        env=env, capture_output=True, text=True, timeout=60,
    )


async def test_the_reconcile_command_enqueues_new_mail_and_says_so(
    client: httpx.AsyncClient, cyrus: CyrusServer, mailbox: FreshUser, embedded_redis_url: str,
    redis_client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(cyrus.ca_file))
    await configure(client, mailbox_wire(cyrus, mailbox), enabled=False)
    first = await run_cli(embedded_redis_url, cyrus)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "first_run" in first.stdout and "caught up" in first.stdout

    new = cyrus.append(user=mailbox.user, subject="seen by the cli")
    second = await run_cli(embedded_redis_url, cyrus, "--once")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "1 new enqueued" in second.stdout
    assert await enqueued(redis_client) == [new.email_id]
    assert mailbox.password not in second.stdout + second.stderr


async def test_the_reconcile_command_exits_2_while_another_pass_runs(
    client: httpx.AsyncClient, cyrus: CyrusServer, mailbox: FreshUser, embedded_redis_url: str,
    redis_client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(cyrus.ca_file))
    await configure(client, mailbox_wire(cyrus, mailbox), enabled=False)
    holder = reconcile_lock(redis_client)
    assert await holder.acquire()
    try:
        busy = await run_cli(embedded_redis_url, cyrus)
    finally:
        await holder.release()
    assert busy.returncode == 2 and "another reconcile pass is running" in busy.stdout
