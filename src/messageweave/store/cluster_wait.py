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
`OWN_IDLE_MS`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from messageweave.store import keys

# How often an UNBLOCK is sent again to a read not blocked yet when the first arrived (its
# XREADGROUP still on the way to the server): rare, and over within a round trip.
_UNBLOCK_AGAIN_S = 0.01


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
                ("XREADGROUP", "GROUP", keys.CONSUMER_GROUP, consumer, "COUNT", count,
                 "BLOCK", block_ms, "STREAMS", *streams, *(">" for _ in streams))]))
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


async def wait_on_every_slot(cluster: Any, consumer: str, groups: list[tuple[str, ...]],
                             count: int, block_ms: int) -> list[Any]:
    """Up to `count` new entries of each group (the streams of one slot), waiting up to
    `block_ms` for the first: XREADGROUP replies, one per group that answered."""
    ids = [asyncio.get_running_loop().create_future() for _ in groups]
    reads = [asyncio.create_task(_blocked_read(cluster, group, consumer, count, block_ms, i))
             for group, i in zip(groups, ids, strict=True)]
    try:
        await asyncio.wait(reads, return_when=asyncio.FIRST_COMPLETED)
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
