"""`messageweave audit` as an operator runs it: a subprocess against the stored configuration,
the real Redis and the real Cyrus."""

from __future__ import annotations

import asyncio
import os
import subprocess

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.mail.reconcile import reconcile
from messageweave.store import keys
from tests.helpers import ADMIN_KEY, FreshUser, configure, console_script, login, mailbox_wire
from tests.peers.cyrus import CyrusServer


async def run_cli(redis_url: str, cyrus: CyrusServer) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REDIS_URL": redis_url, "CONFIG_ENCRYPTION_KEY": ADMIN_KEY,
           "SSL_CERT_FILE": str(cyrus.ca_file), "COLUMNS": "200"}
    return await asyncio.to_thread(
        subprocess.run, [console_script("messageweave"), "audit"],
        env=env, capture_output=True, text=True, timeout=60,
    )


async def test_the_audit_command_finds_a_lost_mail_exits_3_then_0(
    client: httpx.AsyncClient, cyrus: CyrusServer, mailbox: FreshUser, embedded_redis_url: str,
    redis_client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches a command that hides what it found (a cron job must see exit 3 and the mail's
    id), that enqueues a second time when run again, or that leaks the mailbox password."""
    monkeypatch.setenv("SSL_CERT_FILE", str(cyrus.ca_file))
    await configure(client, mailbox_wire(cyrus, mailbox, audit_interval_s=0), enabled=False)
    nothing = await run_cli(embedded_redis_url, cyrus)
    assert nothing.returncode == 0, nothing.stdout + nothing.stderr
    assert "nothing to audit yet" in nothing.stdout

    await reconcile(redis_client, mailbox.client, ["inbox"])
    await redis_client.set(keys.RECONCILE_BASELINE,
                           int(await redis_client.get(keys.RECONCILE_BASELINE)) - 2)
    lost = cyrus.append(user=mailbox.user, subject="lost, found by the cli")
    await redis_client.set(keys.RECONCILE_CURSOR, await mailbox.client.email_state())

    found = await run_cli(embedded_redis_url, cyrus)
    assert found.returncode == 3, found.stdout + found.stderr
    assert "1 checked, 1 missing, 1 re-enqueued" in found.stdout
    assert lost.email_id in found.stdout
    assert mailbox.password not in found.stdout + found.stderr
    [(_, fields)] = await redis_client.xrange(keys.STREAM_JMAP)
    assert fields["email_id"] == lost.email_id

    again = await run_cli(embedded_redis_url, cyrus)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1 checked, 0 missing, 0 re-enqueued" in again.stdout
    assert await redis_client.xlen(keys.STREAM_JMAP) == 1

    records = (await client.get("/api/logs/audit", headers=await login(client))).json()
    cli_runs = [r for r in records["records"] if r["action"] == "gap_audit"]
    assert [r["missing"] for r in cli_runs] == [0, 1, 0]  # newest first, one per run
    assert {r["trigger"] for r in cli_runs} == {"cli"}


async def test_the_audit_command_exits_1_when_the_mailbox_cannot_be_reached(
    client: httpx.AsyncClient, cyrus: CyrusServer, mailbox: FreshUser, embedded_redis_url: str,
    redis_client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches a failure reported as success (exit 0) or as found mail (exit 3)."""
    monkeypatch.setenv("SSL_CERT_FILE", str(cyrus.ca_file))
    await configure(client, mailbox_wire(cyrus, mailbox, jmap_password="pw-WRONG-SECRET",
                                         audit_interval_s=0), enabled=False)
    await redis_client.set(keys.RECONCILE_CURSOR, "some-state")
    failed = await run_cli(embedded_redis_url, cyrus)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert failed.stdout.startswith("fail"), failed.stdout
    assert "pw-WRONG-SECRET" not in failed.stdout + failed.stderr
