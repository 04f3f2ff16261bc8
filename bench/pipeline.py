"""Benchmark (not a test): queued mail events → the real worker → the Telegram emulator.

    .venv/bin/python -m bench.pipeline --events 500

Starts an embedded Redis, a real Cyrus and the Bot API emulator (the test harness's peers),
stores a configuration, lifts the rate governor's limits, then reports:
- the raw redis-py XADD + XREADGROUP + XACK rate on this machine (the ceiling to compare with);
- events/s through the worker and the latency from enqueue (the stream id's timestamp) to the
  emulator holding the sendMessage (polled every 5 ms), p50 / p99.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import redis.asyncio as aioredis
from bench.peers import started_peers
from tests.conftest import CYRUS_USER, running_client, settings_for
from tests.integration.pipeline.conftest import configure, lift_limits, peer_wire

from messageweave.store import keys


async def raw_rate(url: str, n: int) -> float:
    r = aioredis.from_url(url, decode_responses=True)
    await r.delete("bench:raw")
    await r.xgroup_create("bench:raw", "g", id="0", mkstream=True)
    started = time.perf_counter()
    for i in range(n):
        await r.xadd("bench:raw", {"i": str(i)})
        rows = await r.xreadgroup("g", "c", {"bench:raw": ">"}, count=1)
        await r.xack("bench:raw", "g", rows[0][1][0][0])
    elapsed = time.perf_counter() - started
    await r.delete("bench:raw")
    await r.aclose()
    return n / elapsed


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


async def run(events: int) -> None:
    with started_peers("mwb") as peers:
        url, cyrus, emulator = peers.redis_url, peers.cyrus, peers.emulator
        print(f"raw XADD+XREADGROUP+XACK: {await raw_rate(url, 2000):.0f} ops/s")
        email_ids = [cyrus.append(subject=f"bench {n}").email_id for n in range(events)]
        wire = peer_wire(cyrus, emulator)
        redis = aioredis.from_url(url, decode_responses=True)
        async with running_client(settings_for(url)) as client:
            await configure(client, wire)
            await lift_limits(redis)
            enqueued: dict[str, float] = {}
            started = time.time()
            for n, email_id in enumerate(email_ids):
                await redis.xadd(keys.STREAM_JMAP, {"account_id": CYRUS_USER,
                                                    "email_id": email_id})
                enqueued[f"bench {n}"] = time.time()
            seen: dict[str, float] = {}
            while len(seen) < events and time.time() - started < 120:
                for m in await emulator.sent_messages(wire["bot_token"]):
                    subject = m.text.split("\n")[1].removeprefix("Subject: ")
                    seen.setdefault(subject, time.time())
                await asyncio.sleep(0.005)
            elapsed = max(seen.values()) - started
            latency = [(seen[s] - enqueued[s]) * 1000 for s in seen]
            print(f"{len(seen)}/{events} events in {elapsed:.2f} s = {len(seen) / elapsed:.0f}/s; "
                  f"enqueue→sendMessage p50 {statistics.median(latency):.0f} ms, "
                  f"p99 {pct(latency, 0.99):.0f} ms")
        await redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=500)
    asyncio.run(run(parser.parse_args().events))


if __name__ == "__main__":
    main()
