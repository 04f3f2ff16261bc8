"""The writes that must survive a failover wait for a replica (reference §7.18): the ledger's
`sending` intent, the Telegram offset and a webhook update's entry, on the node that holds
them, right after them on the same connection."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from messageweave.pipeline.ledger import Ledger, SendProgress
from messageweave.store import keys
from messageweave.store.receivers import poll_lock, save_offset
from messageweave.store.redis import Redis, open_redis
from messageweave.store.streams import StreamStore, UpdateIngress
from tests.peers.redis7 import RedisProcess

TOKEN = "123:abc"
DONE = "monitor-done"


@contextmanager
def _commands_on(node: RedisProcess) -> Iterator[list[dict[str, Any]]]:
    """Every command `node` runs meanwhile (MONITOR), in order; the list is complete once
    the block is left (an ECHO marks the end)."""
    seen: list[dict[str, Any]] = []
    ready = threading.Event()

    def watch() -> None:
        with node.client() as c, c.monitor() as monitor:
            ready.set()
            for event in monitor.listen():
                if event["command"] == f"ECHO {DONE}":
                    return
                seen.append(event)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield seen
    finally:
        with node.client() as c:
            c.echo(DONE)
        thread.join(10)


def _waits_after(seen: list[dict[str, Any]]) -> bool:
    """A `WAIT 1 …` right after the (one) script of `seen`, from the connection that ran it."""
    for i, event in enumerate(seen):
        if event["command"].startswith("EVAL"):
            conn = (event["client_address"], event["client_port"])
            after = [e for e in seen[i + 1:] if (e["client_address"], e["client_port"]) == conn]
            return bool(after) and after[0]["command"].startswith("WAIT 1 ")
    raise AssertionError(f"the script was not run on this node: {[e['command'] for e in seen]}")


async def _mark_and_save(client: Redis, node_of: Any) -> tuple[bool, bool]:
    streams = StreamStore(client)
    await client.delete(keys.STREAM_JMAP)
    await streams.ensure_groups([keys.STREAM_JMAP])
    entry_id = await streams.add(keys.STREAM_JMAP, {"email_id": "M1"})
    ledger = Ledger(client, f"wait-{secrets.token_hex(3)}")
    begun = await ledger.begin(keys.STREAM_JMAP, entry_id)
    assert begun.state == "go" and begun.lease is not None
    with _commands_on(node_of(begun.lease.inflight_key)) as marks:
        await ledger.mark(begun.lease, SendProgress(), "sending")
    lock = poll_lock(client)
    await client.delete(lock.key)
    assert await lock.acquire()
    with _commands_on(node_of(lock.key)) as saves:
        assert await save_offset(client, lock, TOKEN, 42)
    return _waits_after(marks), _waits_after(saves)


@pytest.mark.parametrize("topology", ["cluster", "sentinel"])
async def test_the_sending_intent_and_the_telegram_offset_wait_for_a_replica(
        topology: str, request: pytest.FixtureRequest) -> None:
    """Catches: the `sending` intent and the Telegram offset acknowledged by the primary
    alone. A failover right after either lost it: the entry was sent again without showing
    as `unknown_after_send` (and despite `at_most_once`), or the updates the next
    `getUpdates` confirmed to Telegram were gone for good. Each now waits for one replica on
    the connection that wrote it, on the node of its key (the cluster's, the Sentinel's
    primary)."""
    peer = request.getfixturevalue("redis_cluster" if topology == "cluster" else "redis_sentinels")
    client = await open_redis(peer.url)
    try:
        def node_of(key: str) -> RedisProcess:
            return peer.primary_of(key) if topology == "cluster" else peer.primary()

        mark_waits, offset_waits = await _mark_and_save(client, node_of)
        assert mark_waits, "the sending intent did not wait for a replica"
        assert offset_waits, "the Telegram offset did not wait for a replica"
    finally:
        await client.aclose()


@pytest.mark.parametrize("topology", ["cluster", "sentinel"])
async def test_a_webhook_update_waits_for_a_replica_before_it_is_answered(
        topology: str, request: pytest.FixtureRequest) -> None:
    """Catches: a Telegram update taken by the webhook acknowledged by the primary alone. The
    webhook answers Telegram once `UpdateIngress` returns, and Telegram never sends an
    answered update again: a failover right after it lost the owner's words for good. The
    entry's script is now followed by `WAIT 1` on the connection that ran it, on the node of
    `{tg}` (the cluster's primary of the chat stream's slot, the Sentinel's primary), before
    `enqueue_if_enabled` returns. (A `kill -9` timed between the answer and the replication
    cannot be placed reliably: the replica has the write within a millisecond.)"""
    peer = request.getfixturevalue("redis_cluster" if topology == "cluster" else "redis_sentinels")
    client = await open_redis(peer.url)
    update_id = secrets.randbelow(10**9)
    try:
        node = (peer.primary_of(keys.STREAM_TELEGRAM) if topology == "cluster"
                else peer.primary())
        await client.set(keys.ENABLED, "1")
        with _commands_on(node) as seen:
            entry = await UpdateIngress(client).enqueue_if_enabled(
                update_id, {"update_id": str(update_id), "text": "buy milk"})
        assert entry is not None
        assert _waits_after(seen), "the webhook's update did not wait for a replica"
    finally:
        await client.xtrim(keys.STREAM_TELEGRAM, maxlen=0)
        await client.delete(keys.ENABLED, keys.dedup_tg(update_id))
        await client.aclose()
