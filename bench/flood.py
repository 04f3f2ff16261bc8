"""Benchmark (not a test): a sustained flood of updates that need no reply, and what it leaves.

    .venv/bin/python -m bench.flood --seconds 60 --connections 32

`messageweave serve` on an embedded Redis (`bench.ingest`'s set-up: configured through its API
with a webhook secret and an allowlisted chat, switched on, its worker running in the serving
process as in production). The load is `bench.ingest`'s raw client (`--connections` keep-alive
connections, one request at a time each, a new `update_id` per request): the highest rate the
webhook accepts on this machine. Every update is a plain text message from the allowlisted chat
that the bot does not answer (`chat.intents` reads it as `Unknown`: the worker runs the
conversation, sends nothing, and finishes the entry in the ledger), unless `--sticker` (a
message without text, which the worker finishes without the conversation).

After a 2 s warm-up (waited out), it floods for `--seconds`, sampling `stalwart:telegram`'s
length every second (the worker deletes each entry it finishes, so the length is the backlog),
then waits until the backlog is 0. Printed:

- the webhook's rate (204s per second of the flood) and the worker's during it (entries
  finished per second: accepted minus the backlog at the end, over the flood), their ratio;
- the backlog at the end, 10 s after it, and the time until it is 0; the worker's rate alone
  (the backlog over that time, no webhook load beside it);
- Redis's `used_memory` and key count before the flood, at its end and once worked off (each
  update leaves its `dedup:tg:{update_id}` claim for `DEDUP_TTL_S` and its ledger's terminal
  record for `COMMITTED_TTL_S`), and the serving process's VmRSS at the same three moments.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis.asyncio as aioredis
from bench.ingest import _configure, _load, _process
from tests.helpers import ADMIN_KEY, console_script, free_port, wait_healthy

from messageweave.store import keys
from messageweave.store.redis import EmbeddedRedis

TEXT = b"thanks, see you tomorrow"


@contextmanager
def _service(data: Path) -> Iterator[tuple[str, str, int]]:
    """(URL, Redis URL, pid) of one configured `messageweave serve` on an embedded Redis."""
    redis_server = EmbeddedRedis(data / "redis")
    redis_url = redis_server.start()
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG_ENABLED", "DEBUG_TOKEN")}
    port = free_port()
    env.update(REDIS_URL=redis_url, CONFIG_ENCRYPTION_KEY=ADMIN_KEY, PORT=str(port))
    argv = [console_script("messageweave"), "serve", "--host", "127.0.0.1"]
    try:
        with _process(argv, env, data / "service.log", port, wait_healthy) as url:
            asyncio.run(_configure(url))
            found = subprocess.run(["pgrep", "-P", str(os.getpid()), "-f", "cli.serving"],
                                   capture_output=True, text=True).stdout.split()
            pid = int(found[0]) if found else 0
            yield url, redis_url, pid
    finally:
        redis_server.stop()


def _rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024


async def _memory(redis: aioredis.Redis, pid: int) -> dict[str, float]:
    info = await redis.info("memory")
    clients = await redis.info("clients")
    return {"redis_mb": int(info["used_memory"]) / 2**20, "keys": await redis.dbsize(),
            "clients": int(clients["connected_clients"]),
            "rss_mb": _rss_mb(pid) if pid else 0.0}


async def _sample(redis: aioredis.Redis, stop: asyncio.Event, out: list[int]) -> None:
    while not stop.is_set():
        out.append(await redis.xlen(keys.STREAM_TELEGRAM))
        await asyncio.sleep(1.0)


async def _worked_off(redis: aioredis.Redis, limit_s: float = 600) -> tuple[float, int]:
    """Seconds until the backlog is 0, and the backlog 10 s after the call."""
    started = time.monotonic()
    at_10s = -1
    while True:
        backlog = await redis.xlen(keys.STREAM_TELEGRAM)
        if at_10s < 0 and time.monotonic() - started >= 10:
            at_10s = backlog
        if backlog == 0:
            return time.monotonic() - started, max(at_10s, 0)
        assert time.monotonic() - started < limit_s, "the worker did not catch up"
        await asyncio.sleep(0.05)


async def flood(redis_url: str, port: int, pid: int, seconds: float, connections: int,
                text: bytes | None) -> dict[str, float]:
    redis = aioredis.from_url(redis_url)
    ids = itertools.count(1)
    try:
        await _load(port, ids, 2.0, connections, "raw", text)  # warm-up
        await _worked_off(redis)
        before = await _memory(redis, pid)
        backlog: list[int] = []
        stop = asyncio.Event()
        sampler = asyncio.create_task(_sample(redis, stop, backlog))
        started = time.monotonic()
        first = next(ids)
        rate = await _load(port, ids, seconds, connections, "raw", text)
        took = time.monotonic() - started
        end_backlog = await redis.xlen(keys.STREAM_TELEGRAM)
        stop.set()
        await sampler
        at_end = await _memory(redis, pid)
        accepted = next(ids) - first - 1
        drain_s, after_10s = await _worked_off(redis)
        worked_off = await _memory(redis, pid)
        worker = (accepted - end_backlog) / took
        print("backlog each second: " + " ".join(str(b) for b in backlog), flush=True)
        return {"seconds": took, "accepted": accepted, "webhook_per_s": rate,
                "worker_per_s": worker, "ratio": worker / rate, "backlog_end": end_backlog,
                "backlog_10s_after": after_10s, "worked_off_s": drain_s,
                "worker_alone_per_s": end_backlog / drain_s if drain_s else 0.0,
                **{f"before_{k}": v for k, v in before.items()},
                **{f"end_{k}": v for k, v in at_end.items()},
                **{f"after_{k}": v for k, v in worked_off.items()}}
    finally:
        await redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--sticker", action="store_true",
                        help="messages without text instead of plain text the bot ignores")
    args = parser.parse_args()
    data = Path(tempfile.mkdtemp(prefix="mwf", dir="/tmp"))
    load = os.getloadavg()
    try:
        with _service(data) as (url, redis_url, pid):
            port = int(url.rsplit(":", 1)[1])
            r = asyncio.run(flood(redis_url, port, pid, args.seconds, args.connections,
                                  None if args.sticker else TEXT))
    finally:
        shutil.rmtree(data, ignore_errors=True)
    kind = "stickers" if args.sticker else "plain text, no reply"
    print(f"flood {r['seconds']:.0f} s ({kind}, {args.connections} connections): webhook "
          f"{r['webhook_per_s']:.0f}/s, worker {r['worker_per_s']:.0f}/s during it (ratio "
          f"{r['ratio']:.2f}), {r['worker_alone_per_s']:.0f}/s alone after; backlog at the end "
          f"{r['backlog_end']:.0f}, 10 s after {r['backlog_10s_after']:.0f}, 0 after "
          f"{r['worked_off_s']:.1f} s; Redis used_memory {r['before_redis_mb']:.1f} → "
          f"{r['end_redis_mb']:.1f} → {r['after_redis_mb']:.1f} MB (keys {r['before_keys']:.0f}"
          f" → {r['end_keys']:.0f} → {r['after_keys']:.0f}); serve RSS {r['before_rss_mb']:.1f}"
          f" → {r['end_rss_mb']:.1f} → {r['after_rss_mb']:.1f} MB (before → end → worked off);"
          f" Redis clients {r['before_clients']:.0f} → {r['end_clients']:.0f} → "
          f"{r['after_clients']:.0f};"
          f" load average at the start {load[0]:.2f}")
    print("SUMMARY flood: " + json.dumps({k: round(v, 2) for k, v in r.items()}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
