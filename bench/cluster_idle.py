"""Benchmark (not a test): what an idle worker's wait costs on a Redis Cluster with N accounts
(issue #36, reference §7.18), beside one server.

    .venv/bin/python -m bench.cluster_idle --accounts 1,10,50 --seconds 10

For each N, on a new Redis of each side (`bench.cluster.redis_side`): the groups of N mail
streams (`a:{acct<i>}:stalwart:jmap`) and `{tg}`'s, then `StreamStore.read_new` in a loop as
the worker's read loop runs it when nothing comes (`block_ms` = 1000, the worker's), for
`--seconds`. Measured: the connections blocked at once (`CLIENT LIST` of every primary,
`flags` holding `b`) and the server memory they hold (`tot-mem`), the commands every primary
ran per second (`INFO commandstats`), and the client's CPU per second.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter
from typing import Any

from bench.cluster import redis_side

from messageweave.store import keys
from messageweave.store.redis import Redis, open_redis
from messageweave.store.redis_url import is_cluster
from messageweave.store.streams import StreamStore

BLOCK_MS = 1000  # `WorkerOptions.block_ms`


async def _on_every_primary(redis: Redis, method: str, *args: str) -> list[Any]:
    """The reply of the client's `method` from every primary (the one server's alone)."""
    if not is_cluster(redis):
        return [await getattr(redis, method)(*args)]
    cluster: Any = redis
    return [await getattr(cluster, method)(*args, target_nodes=node)
            for node in cluster.get_primaries()]


async def _calls(redis: Redis) -> Counter[str]:
    """The commands every primary ran so far, by name (without ours: INFO, CLIENT LIST)."""
    total: Counter[str] = Counter()
    for stats in await _on_every_primary(redis, "info", "commandstats"):
        total.update({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()
                      if k not in ("cmdstat_info", "cmdstat_client|list")})
    return total


async def _blocked(redis: Redis) -> tuple[int, int]:
    """The clients blocked now on every primary, and the bytes they hold there."""
    count = memory = 0
    for clients in await _on_every_primary(redis, "client_list"):
        for client in clients:
            if "b" in client["flags"]:
                count += 1
                memory += int(client.get("tot-mem", 0))
    return count, memory


async def measure(url: str, accounts: int, seconds: float) -> str:
    redis = await open_redis(url)
    try:
        if is_cluster(redis):
            await redis.initialize()  # type: ignore[attr-defined]
        streams = [keys.AccountKeys(f"acct{i}").stream_jmap for i in range(accounts)]
        streams.append(keys.STREAM_TELEGRAM)
        store = StreamStore(redis)
        await store.ensure_groups(streams)
        stop = time.monotonic() + seconds

        async def idle() -> None:
            while time.monotonic() < stop:
                assert not await store.read_new("idle", 16, BLOCK_MS, streams)

        reading = asyncio.create_task(idle())
        await asyncio.sleep(0.5)  # into the wait
        calls, cpu, started = await _calls(redis), time.process_time(), time.monotonic()
        seen = []
        for _ in range(3):
            seen.append(await _blocked(redis))
            await asyncio.sleep(0.2)
        await reading
        took = time.monotonic() - started
        ran = await _calls(redis) - calls
        per_s = ", ".join(f"{name} {n / took:.1f}" for name, n in ran.most_common())
        blocked, memory = max(seen)
        cpu_ms = (time.process_time() - cpu) / took * 1000
        return (f"{blocked} blocked ({memory / 1024:.0f} KiB on the server), "
                f"commands/s: {per_s}; client CPU {cpu_ms:.1f} ms/s")
    finally:
        await redis.aclose()


async def run(counts: list[int], seconds: float, sides: list[str]) -> None:
    for side in sides:
        for n in counts:
            with redis_side(side) as url:
                print(f"{side}, {n} accounts: {await measure(url, n, seconds)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--accounts", default="1,10,50")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--sides", default="single,cluster")
    args = parser.parse_args()
    asyncio.run(run([int(n) for n in args.accounts.split(",")], args.seconds,
                    args.sides.split(",")))


if __name__ == "__main__":
    main()
