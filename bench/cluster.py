"""Benchmark (not a test): the service on a Redis Cluster and a Sentinel set beside one server
(issue #36's bench row, issue #37 item 5), same run, same machine.

    .venv/bin/python -m bench.cluster --events 600 --chats 30 --rounds 3
    .venv/bin/python -m bench.cluster --delivery --mails 30 --chats 5 --rounds 2 \\
        --sides single,cluster

Each side is a Redis of its own, started for each run and stopped after it:
- `single`: one Debian redis-server (7.0) on loopback TCP, configured as each cluster node is
  (password, no persistence), without `cluster-enabled`;
- `cluster`: three primaries and three replicas (`tests/peers/redis_cluster.py`);
- `sentinel`: a primary, two replicas, three sentinels (`tests/peers/redis_sentinel.py`);
- `embedded`: the embedded Redis 6.2 on its Unix socket, what `messageweave run` starts.

The sides alternate within each round, and every other round runs them in the reverse order
(ABBA…), so a drift of the machine's load falls on every side alike.

Default, **pipeline throughput**: `bench.pipeline.measure` (the app in process, the 30-chat
workload, the governor's limits lifted, all events queued at once) on each side; per side the
median of its rounds' events/s and the ratio to `single`'s (issue #37's target: cluster
≥ 0.8 × single). `--delivery`: `bench.delivery.run` (`messageweave run` with `REDIS_URL` of the
side, the EventSource delivery → chat beside its bare floor, then the chat round trip) on each
side; per side the p50 / p99 of ours and of the floor, over every round's mails, and of the
chat round trip beside its echo floor (target: the cluster's p99 within 20 ms of single's).
Each connection hears Cyrus's once-a-second `jmap_pushpoll` at its own phase, so those figures
move by tens of ms between runs; `--marks DIR` with an app tree patched with
`bench/marks.patch` (see `bench/delivery.py`) also gives our own path, our `state` event → our
sendMessage answered, which the phases do not touch:

    mkdir /tmp/mw-marks && git archive HEAD src | tar -x -C /tmp/mw-marks
    (cd /tmp/mw-marks && patch -p1 < "$OLDPWD/bench/marks.patch")
    PYTHONPATH=/tmp/mw-marks/src .venv/bin/python -m bench.cluster --delivery --marks /tmp/mwm
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import redis
from bench import delivery
from bench.peers import started_peers
from bench.pipeline import Throughput, measure, pct
from tests.peers.cyrus import free_port
from tests.peers.redis7 import DEBIAN_REDIS
from tests.peers.redis_cluster import PASSWORD, running_cluster
from tests.peers.redis_sentinel import running_sentinels

from messageweave.store.redis import EmbeddedRedis, die_with_parent

SIDES = ("single", "cluster", "sentinel", "embedded")


@contextlib.contextmanager
def _single(base: Path) -> Iterator[str]:
    """One redis-server with the cluster nodes' configuration, minus the cluster."""
    port = free_port("127.0.0.1")
    proc = subprocess.Popen([DEBIAN_REDIS, "-"], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=die_with_parent)
    assert proc.stdin is not None
    with proc.stdin:
        proc.stdin.write((f'bind 127.0.0.1\nport {port}\ndir "{base}"\nappendonly no\n'
                          f'save ""\nrequirepass "{PASSWORD}"\ndaemonize no\n'
                          "logfile redis.log\n").encode())
    try:
        probe = redis.Redis("127.0.0.1", port, password=PASSWORD)
        for _ in range(200):
            with contextlib.suppress(redis.ConnectionError):
                if probe.ping():
                    break
            time.sleep(0.02)
        probe.close()
        yield f"redis://:{quote(PASSWORD, safe='')}@127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


@contextlib.contextmanager
def _cluster(base: Path) -> Iterator[str]:
    """The cluster peer; started again (3 tries) when a node died at its start (a free port
    taken meanwhile by another process on this shared machine)."""
    for attempt in range(3):
        try:
            started = running_cluster(base / f"try{attempt}")
            cluster = started.__enter__()
        except (redis.ConnectionError, TimeoutError) as exc:
            print(f"the cluster did not start ({exc}): again", flush=True)
            continue
        try:
            yield cluster.url
        finally:
            started.__exit__(None, None, None)
        return
    raise RuntimeError("the cluster did not start in 3 tries")


@contextlib.contextmanager
def redis_side(side: str) -> Iterator[str]:
    """The URL of a new Redis of the kind `side` names, stopped and removed after."""
    base = Path(tempfile.mkdtemp(prefix=f"mwc-{side}", dir="/tmp"))
    try:
        if side == "single":
            with _single(base) as url:
                yield url
        elif side == "cluster":
            with _cluster(base) as url:
                yield url
        elif side == "sentinel":
            with running_sentinels(base) as sentinels:
                yield sentinels.url
        else:
            embedded = EmbeddedRedis(base / "redis")
            try:
                yield embedded.start()
            finally:
                embedded.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def schedule(sides: list[str], rounds: int) -> list[str]:
    """Every side once per round, every other round in the reverse order (ABBA…)."""
    return [s for r in range(rounds) for s in (sides if r % 2 == 0 else sides[::-1])]


async def throughput(sides: list[str], rounds: int, events: int, chats: int) -> None:
    results: dict[str, list[Throughput]] = {s: [] for s in sides}
    for side in schedule(sides, rounds):
        load = os.getloadavg()[0]
        with started_peers("mwc", embedded_redis=False) as peers, redis_side(side) as url:
            result = await measure(url, peers.cyrus, peers.emulator, events, chats)
        results[side].append(result)
        print(f"{time.strftime('%H:%M:%S', time.gmtime())} {side}: load {load:.2f}, "
              f"{result.delivered}/{events} events {result.rate:.0f}/s, raw Redis "
              f"{result.raw:.0f} ops/s, p50 {result.p50_ms:.0f} / p99 {result.p99_ms:.0f} ms, "
              f"CPU {result.cpu_ms:.2f} ms/event", flush=True)
    base = statistics.median(r.rate for r in results[sides[0]])
    for side, runs in results.items():
        rate = statistics.median(r.rate for r in runs)
        print(f"summary {side}: events/s median {rate:.0f} (runs "
              f"{', '.join(f'{r.rate:.0f}' for r in runs)}), ×{rate / base:.2f} of "
              f"{sides[0]}; raw Redis median {statistics.median(r.raw for r in runs):.0f} "
              f"ops/s; p50 {statistics.median(r.p50_ms for r in runs):.0f} / p99 "
              f"{statistics.median(r.p99_ms for r in runs):.0f} ms; CPU median "
              f"{statistics.median(r.cpu_ms for r in runs):.2f} ms/event")


def _beside(o: list[float], f: list[float]) -> str:
    """Ours and the floor's p50 / p99, and the differences of each quantile."""
    return (f"ours p50 {statistics.median(o):.0f} / p99 {pct(o, 0.99):.0f} ms, floor p50 "
            f"{statistics.median(f):.0f} / p99 {pct(f, 0.99):.0f} ms, ours − floor "
            f"{statistics.median(o) - statistics.median(f):+.0f} / "
            f"{pct(o, 0.99) - pct(f, 0.99):+.0f} ms ({len(o)})")


async def delivered(sides: list[str], rounds: int, mails: int, chats: int,
                    marks: Path | None) -> None:
    runs: dict[str, list[delivery.Delivered]] = {s: [] for s in sides}
    for n, side in enumerate(schedule(sides, rounds)):
        print(f"--- {time.strftime('%H:%M:%S', time.gmtime())} {side}", flush=True)
        with redis_side(side) as url:
            runs[side].append(await delivery.run(
                mails, 1.618, chats, marks and marks / f"{n}-{side}.log", redis_url=url))
    for side, done in runs.items():
        mail = _beside([x for r in done for x in r.ours], [x for r in done for x in r.floor])
        chat = _beside([x for r in done for x in r.chat], [x for r in done for x in r.chat_floor])
        print(f"summary {side}: delivery → chat {mail}; chat round trip {chat}")
        path = [x for r in done for x in r.path]
        if path:
            print(f"summary {side}: our path, our state event → our sendMessage answered, "
                  f"p50 {statistics.median(path):.1f} / p99 {pct(path, 0.99):.1f} ms "
                  f"({len(path)} mails)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sides", default="single,cluster,sentinel",
                        help=f"comma-separated, the first is the reference: {', '.join(SIDES)}")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--events", type=int, default=600)
    parser.add_argument("--chats", type=int, default=30)
    parser.add_argument("--delivery", action="store_true",
                        help="time EventSource delivery → chat instead of the throughput")
    parser.add_argument("--mails", type=int, default=30)
    parser.add_argument("--marks", type=Path, default=None,
                        help="a directory for each run's marks (the app's tree patched with "
                        "bench/marks.patch, as in bench.delivery)")
    args = parser.parse_args()
    sides = args.sides.split(",")
    if not sides or any(s not in SIDES for s in sides):
        parser.error(f"--sides takes {', '.join(SIDES)}")
    if args.delivery:
        if args.marks is not None:
            args.marks.mkdir(parents=True, exist_ok=True)
        asyncio.run(delivered(sides, args.rounds, args.mails, args.chats, args.marks))
    else:
        asyncio.run(throughput(sides, args.rounds, args.events, args.chats))


if __name__ == "__main__":
    main()
