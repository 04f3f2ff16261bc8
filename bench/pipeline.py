"""Benchmark (not a test): queued events → the real worker → the Telegram emulator.

    .venv/bin/python -m bench.pipeline --events 500 [--chats N]

Starts an embedded Redis, a real Cyrus and the Bot API emulator (the test harness's peers),
stores a configuration, lifts the rate governor's limits, then reports:
- the raw redis-py XADD + XREADGROUP + XACK rate on this machine (the ceiling to compare with);
- events/s through the worker and the latency from enqueue (the stream id's timestamp) to the
  emulator holding the sendMessage (polled every 5 ms), p50 / p99;
- both on one summary line at the end.

The workload, spread over `--chats N` chats (round-robin, all in the allowlist): every mail
notification goes to the configuration's one `telegram_chat_id` (`pipeline.events.lane_of`), so
that chat's events are new mails (`stalwart:jmap`, an Email/get each); the events of each other
chat are `/help` messages from its owner (`stalwart:telegram`, through the webhook's own
`enqueue_updates_if_enabled`), each answered by one reply. `--chats 1` is the single-chat
notification throughput (one sequential lane).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import dataclass

from bench.peers import started_peers
from tests.helpers import CYRUS_USER, running_client, settings_for
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import SentMessage, TelegramEmulator
from tests.served import CHAT, configure, lift_limits, peer_wire

from messageweave.store import keys
from messageweave.store.redis import open_redis
from messageweave.store.streams import StreamStore


async def raw_rate(url: str, n: int) -> float:
    r = await open_redis(url)
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


@dataclass(frozen=True)
class Throughput:
    """One run's figures: events/s through the worker, the raw Redis rate beside it, the
    enqueue → sendMessage latency, and the CPU time the process spent per event."""

    events: int
    delivered: int
    rate: float
    raw: float
    p50_ms: float
    p99_ms: float
    cpu_ms: float  # this process's CPU time (the app's, mostly) per event


async def measure(url: str, cyrus: CyrusServer, emulator: TelegramEmulator, events: int,
                  chats: int) -> Throughput:
    """The app in process on the Redis at `url` (any topology `open_redis` knows), a bot token
    of its own, the events queued at once; the figures once every message is stored."""
    chat_ids = [CHAT + n for n in range(chats)]
    notified = CHAT  # the configuration's telegram_chat_id
    plan = [chat_ids[n % chats] for n in range(events)]
    raw = await raw_rate(url, 2000)
    mails = iter([cyrus.append(subject=f"bench {n}").email_id
                  for n, chat in enumerate(plan) if chat == notified])
    wire = peer_wire(cyrus, emulator, telegram_chat_id=notified, chat_allowlist=chat_ids)
    redis = await open_redis(url)
    streams = StreamStore(redis)
    async with running_client(settings_for(url)) as client:
        await configure(client, wire)
        await lift_limits(redis)
        # Queued faster than the worker takes them (the mails one XADD each, the chats'
        # messages 100 to a script run), so that the worker's rate is measured, not the
        # queueing's. Each chat's lane is sequential: its k-th message answers its k-th event.
        started, cpu_started = time.time(), time.process_time()
        for chat in plan:
            if chat == notified:
                await redis.xadd(keys.STREAM_JMAP, {"account_id": CYRUS_USER,
                                                    "email_id": next(mails)})
        updates = [(n, {"update_id": str(n), "chat_id": str(chat), "text": "/help"})
                   for n, chat in enumerate(plan) if chat != notified]
        for at in range(0, len(updates), 100):
            await streams.enqueue_updates_if_enabled(updates[at:at + 100])
        queued = time.time()
        # The emulator stamps each message (`stored_ms`, this host's clock): polled slowly, so
        # that the bench's own reads (every message each time) take little of this process's
        # CPU, which the app in it shares.
        sent: list[SentMessage] = []
        while len(sent) < events and time.time() - started < 120:
            await asyncio.sleep(0.1)
            sent = await emulator.sent_messages(wire["bot_token"])
        cpu = time.process_time() - cpu_started
    seen: dict[tuple[int, int], float] = {}
    per_chat: dict[int, int] = {}
    for m in sorted(sent, key=lambda m: m.stored_ms):
        k = per_chat.get(m.chat_id, 0)
        per_chat[m.chat_id] = k + 1
        seen[(m.chat_id, k)] = m.stored_ms / 1000
    await redis.aclose()
    elapsed = max(seen.values()) - started
    latency = [(at - queued) * 1000 for at in seen.values()]
    return Throughput(events, len(seen), len(seen) / elapsed, raw, statistics.median(latency),
                      pct(latency, 0.99), cpu * 1000 / max(1, len(seen)))


async def run(events: int, chats: int) -> None:
    with started_peers("mwb") as peers:
        result = await measure(peers.redis_url, peers.cyrus, peers.emulator, events, chats)
    print(f"raw XADD+XREADGROUP+XACK: {result.raw:.0f} ops/s")
    print(f"{result.delivered}/{events} events = {result.rate:.0f}/s; "
          f"enqueue→sendMessage p50 {result.p50_ms:.0f} ms, p99 {result.p99_ms:.0f} ms; "
          f"CPU {result.cpu_ms:.2f} ms/event")
    print(f"summary: chats={chats} events={events} events/s={result.rate:.0f} "
          f"raw_redis_ops/s={result.raw:.0f} p50_ms={result.p50_ms:.0f} "
          f"p99_ms={result.p99_ms:.0f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=500)
    parser.add_argument("--chats", type=int, default=1,
                        help="chats the events are spread over (1-100, the allowlist's limit)")
    args = parser.parse_args()
    if not 1 <= args.chats <= 100:
        parser.error("--chats must be between 1 and 100")
    asyncio.run(run(args.events, args.chats))


if __name__ == "__main__":
    main()
