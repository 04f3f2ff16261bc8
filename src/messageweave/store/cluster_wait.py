"""An idle worker's wait on a Redis Cluster: one blocking XREADGROUP per slot, all at once
(reference §7.18).

One command cannot name streams of two slots, so a worker that waited on each slot in turn
answered an entry of the slot it was not waiting on up to `block_ms`·(n−1)/n late (measured:
the EventSource delivery p99 +480 ms on the cluster beside one server, `bench/cluster.py`).
Here every slot's read blocks at the same time, each on a connection of its own to the slot's
node; the first to answer ends the wait, and the others are ended by `CLIENT UNBLOCK` (their
reply: nothing, or the entries the server gave them first, which are returned too: an entry
handed to this consumer is never dropped). Closing a blocked connection instead would leave
an entry the server handed over in the moment it closed pending, unseen, until
`OWN_IDLE_MS`. When the first read answers nothing (its wait timed out), the others, sent
together with the same timeout, time out on their own within moments: they are awaited, not
unblocked (an idle worker sent one `CLIENT UNBLOCK` per slot every `block_ms`, each on one more
connection).

`read_now` is the read without waiting, sent straight to its slot's node: routed by
redis-py's cluster client, every XREADGROUP cost two `COMMAND GETKEYS` round trips first
(XREADGROUP's keys are "movable": redis-py asks a node where they are).
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from messageweave.store import keys

# How often an UNBLOCK is sent again to a read not blocked yet when the first arrived (its
# XREADGROUP still on the way to the server): rare, and over within a round trip.
_UNBLOCK_AGAIN_S = 0.01


def _xreadgroup(consumer: str, streams: tuple[str, ...], count: int,
                block_ms: int | None = None) -> list[Any]:
    """The XREADGROUP of `streams`' new entries, waiting `block_ms` when given."""
    wait = [] if block_ms is None else ["BLOCK", block_ms]
    return ["XREADGROUP", "GROUP", keys.CONSUMER_GROUP, consumer, "COUNT", count, *wait,
            "STREAMS", *streams, *(">" for _ in streams)]


async def read_now(cluster: Any, consumer: str, streams: tuple[str, ...], count: int) -> Any:
    """Up to `count` new entries of `streams` (one slot's), without waiting: the XREADGROUP
    reply. A connection that fails takes the client's own path, which loads the slot table
    again and retries (a failover)."""
    await cluster.initialize()  # a table the last failure marked stale: loaded again first
    command = _xreadgroup(consumer, streams, count)
    try:
        return await cluster.execute_command(
            *command, target_nodes=cluster.get_node_from_key(streams[0]))
    except (RedisConnectionError, RedisTimeoutError):
        return await cluster.execute_command(*command)


async def _blocked_read(cluster: Any, streams: tuple[str, ...], consumer: str, count: int,
                        block_ms: int, client_id: asyncio.Future[tuple[Any, int]]) -> Any:
    """XREADGROUP … BLOCK on a connection of its own to the node of `streams`' slot, sent with
    a `CLIENT ID` before it (one write), whose answer `client_id` gets for `CLIENT UNBLOCK`."""
    node = cluster.get_node_from_key(streams[0])
    connection = node.acquire_connection()
    try:
        await connection.send_packed_command(
            connection.pack_commands([
                ("CLIENT", "ID"),
                _xreadgroup(consumer, streams, count, block_ms)]))
        client_id.set_result((node, int(await connection.read_response())))
        return await node.parse_response(connection, "XREADGROUP")
    except BaseException:
        if not client_id.done():
            client_id.cancel()
        await connection.disconnect()  # a reply may be half read: never reuse it
        raise
    finally:
        node.release(connection)


async def _unblock(cluster: Any, read: asyncio.Task[Any],
                   client_id: asyncio.Future[tuple[Any, int]]) -> None:
    """End `read`'s wait; it answers at once (nil, or what it was given meanwhile)."""
    try:
        node, blocked = await client_id
    except asyncio.CancelledError:
        return  # the read failed before it was sent: nothing blocks
    while not read.done():
        await cluster.execute_command("CLIENT", "UNBLOCK", blocked, target_nodes=node)
        await asyncio.wait({read}, timeout=_UNBLOCK_AGAIN_S)


def _timed_out(read: asyncio.Task[Any]) -> bool:
    """A read that ended with nothing: its wait timed out (none was unblocked yet)."""
    return not read.cancelled() and read.exception() is None and not read.result()


async def wait_on_every_slot(cluster: Any, consumer: str, groups: list[tuple[str, ...]],
                             count: int, block_ms: int) -> list[Any]:
    """Up to `count` new entries of each group (the streams of one slot), waiting up to
    `block_ms` for the first: XREADGROUP replies, one per group that answered."""
    ids = [asyncio.get_running_loop().create_future() for _ in groups]
    reads = [asyncio.create_task(_blocked_read(cluster, group, consumer, count, block_ms, i))
             for group, i in zip(groups, ids, strict=True)]
    try:
        done, _ = await asyncio.wait(reads, return_when=asyncio.FIRST_COMPLETED)
        if all(_timed_out(read) for read in done):  # the others' timeouts are due as well
            await asyncio.wait(reads)
        await asyncio.gather(*(_unblock(cluster, read, i)
                               for read, i in zip(reads, ids, strict=True)
                               if not read.done()))
        replies = await asyncio.gather(*reads, return_exceptions=True)
    finally:
        for read in reads:  # cancelled meanwhile: none left running
            read.cancel()
        await asyncio.gather(*reads, return_exceptions=True)
    answered = [r for r in replies if r and not isinstance(r, BaseException)]
    failed = [r for r in replies if isinstance(r, BaseException)]
    if failed and not answered:
        raise failed[0]
    # With entries in hand, they are returned; the failed slot fails again at the next read.
    return answered
