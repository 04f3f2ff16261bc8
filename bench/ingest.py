"""Benchmark (not a test): `POST /webhook/tg` throughput of the real service, against bare ASGI
endpoints served the same way.

    .venv/bin/python -m bench.ingest --seconds 5 --rounds 2 --connections 32
    .venv/bin/python -m bench.ingest --client raw --client httpx   # both load generators

Starts an embedded Redis and three servers, each a subprocess on a local port with the same
uvicorn settings (`messageweave.server.serve`: the same protocol class, loop and read limits):

- the real service (`messageweave serve`), configured through its API with a webhook secret and an
  allowlisted chat, and switched on; its worker runs as in production;
- `bare`: a bare ASGI app that answers every request 204 without reading anything
  (`bench.bare`);
- `bare+redis`: a bare ASGI app that reads the body and makes one Redis round trip (an `XADD` on
  the same Redis) before its 204 (`bench.bare --redis`): the least a webhook that queues its
  update must do, so `service / bare+redis` is what the service's own layers cost;
- `bare+batch`: the same with the XADDs of the requests waiting at one moment in one pipelined
  round trip (`bench.bare --redis --batched`), as the service batches its own script runs.

A load generator (`--connections` tasks, each sending one request at a time; every request a
new `update_id`, a message without text from the allowlisted chat, so the worker acknowledges it
without calling Telegram) loads each server for `--seconds`, alternating for `--rounds` rounds so
that a busy machine weighs on all alike; after each load of the service the bench waits until
its worker has finished the updates it queued, so its backlog takes no CPU from the next
server (until session 5 it did: the bare servers were measured beside a worker catching up),
and prints how long that took. Every answer must be 204. `--client` picks the load generator,
and may be given more than once (the servers are then started once for all):

- `raw` (the default): one keep-alive HTTP/1.1 connection per task, requests written as bytes
  and answers read off the socket, so the client costs as little as it can;
- `httpx`: one `httpx.AsyncClient` pool of `--connections` connections shared by the tasks, as
  issue #14 first measured it (the client then takes a large share of the CPU itself).

Each client ends with one summary line: req/s of each server and the service's ratio to each
bare one.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import redis.asyncio as aioredis
from tests.helpers import ADMIN_KEY, console_script, free_port, login, sample_wire, wait_healthy

from messageweave.api.delivery import SECRET_HEADER
from messageweave.store import keys
from messageweave.store.redis import EmbeddedRedis

WIRE = sample_wire()
CHAT = int(WIRE["chat_allowlist"][0])
CLIENTS = ("raw", "httpx")


TARGETS = ("service", "bare", "bare+redis", "bare+batch")


def _request(update_id: int, secret: str, text: bytes | None = None) -> bytes:
    """One webhook request: a message without text (a sticker), or with `text` (JSON-safe)."""
    content = b'"sticker":{"file_id":"x"}' if text is None else b'"text":"%s"' % text
    body = (b'{"update_id":%d,"message":{"message_id":1,"date":0,'
            b'"chat":{"id":%d,"type":"private"},%s}}' % (update_id, CHAT, content))
    head = ("POST /webhook/tg HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
            f"{SECRET_HEADER}: {secret}\r\nContent-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


async def _connection(port: int, ids: Iterator[int], secret: str, stop_at: float,
                      statuses: dict[int, int], text: bytes | None = None) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.monotonic() < stop_at:
            writer.write(_request(next(ids), secret, text))
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            statuses[status] = statuses.get(status, 0) + 1
            for line in head.lower().split(b"\r\n"):
                if line.startswith(b"content-length:"):
                    await reader.readexactly(int(line[15:]))
    finally:
        writer.close()


async def _httpx_task(client: httpx.AsyncClient, ids: Iterator[int], secret: str,
                      stop_at: float, statuses: dict[int, int]) -> None:
    headers = {SECRET_HEADER: secret, "content-type": "application/json"}
    while time.monotonic() < stop_at:
        update = {"update_id": next(ids), "message": {
            "message_id": 1, "date": 0, "chat": {"id": CHAT, "type": "private"},
            "sticker": {"file_id": "x"}}}
        response = await client.post("/webhook/tg", json=update, headers=headers)
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1


async def _load(port: int, ids: Iterator[int], seconds: float, connections: int,
                client: str, text: bytes | None = None) -> float:
    """Requests per second over `seconds`, every answer a 204 (else the bench fails)."""
    statuses: dict[int, int] = {}
    secret = str(WIRE["telegram_webhook_secret"])
    started = time.monotonic()
    if client == "httpx":
        limits = httpx.Limits(max_connections=connections,
                              max_keepalive_connections=connections)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits,
                                     trust_env=False) as pool:
            await asyncio.gather(*(_httpx_task(pool, ids, secret, started + seconds, statuses)
                                   for _ in range(connections)))
    else:
        await asyncio.gather(*(_connection(port, ids, secret, started + seconds, statuses,
                                           text) for _ in range(connections)))
    elapsed = time.monotonic() - started
    assert set(statuses) == {204}, statuses
    return sum(statuses.values()) / elapsed


async def _configure(url: str) -> None:
    async with httpx.AsyncClient(base_url=url, trust_env=False) as client:
        session = await login(client)
        saved = await client.put("/api/business-config", json=WIRE, headers=session)
        assert saved.status_code == 200, saved.text
        enabled = await client.put("/api/enabled", json={"enabled": True}, headers=session)
        assert enabled.status_code == 200, enabled.text


@contextmanager
def _process(argv: list[str], env: dict[str, str], log: Path, port: int,
             ready: Callable[[str, subprocess.Popen[str]], None]) -> Iterator[str]:
    url = f"http://127.0.0.1:{port}"
    with log.open("w") as sink:
        proc = subprocess.Popen(argv, env=env, stdout=sink, stderr=sink, text=True)
    try:
        try:
            ready(url, proc)
        except AssertionError:
            print(log.read_text(), file=sys.stderr)
            raise
        yield url
    finally:
        proc.terminate()
        proc.wait(20)


def _wait_listening(url: str, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 20
    while True:
        assert proc.poll() is None, "the bare server exited early"
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            assert time.monotonic() < deadline, "the bare server did not start"
            time.sleep(0.1)


@contextmanager
def _servers(data: Path) -> Iterator[tuple[dict[str, int], str]]:
    """The servers, started once: their ports by target, and the Redis URL."""
    redis_server = EmbeddedRedis(data / "redis")
    redis_url = redis_server.start()
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG_ENABLED", "DEBUG_TOKEN")}
    ports = {target: free_port() for target in TARGETS}
    env.update(REDIS_URL=redis_url, CONFIG_ENCRYPTION_KEY=ADMIN_KEY, PORT=str(ports["service"]))
    bare = [sys.executable, "-m", "bench.bare"]
    try:
        with _process([console_script("messageweave"), "serve", "--host", "127.0.0.1"], env,
                      data / "service.log", ports["service"], wait_healthy) as url, \
             _process([*bare, str(ports["bare"])], env, data / "bare.log", ports["bare"],
                      _wait_listening), \
             _process([*bare, str(ports["bare+redis"]), "--redis"], env,
                      data / "bare-redis.log", ports["bare+redis"], _wait_listening), \
             _process([*bare, str(ports["bare+batch"]), "--redis", "--batched"], env,
                      data / "bare-batch.log", ports["bare+batch"], _wait_listening):
            asyncio.run(_configure(url))
            yield ports, redis_url
    finally:
        redis_server.stop()


async def _drained(redis_url: str) -> float:
    """Seconds until the service's worker has finished every update queued so far (its
    entries are deleted when finished): the next server is loaded on a machine the service's
    backlog no longer takes CPU from."""
    started = time.monotonic()
    client = aioredis.from_url(redis_url)
    try:
        while await client.xlen(keys.STREAM_TELEGRAM):
            assert time.monotonic() - started < 300, "the worker did not catch up"
            await asyncio.sleep(0.05)
    finally:
        await client.aclose()
    return time.monotonic() - started


async def _compare(ports: dict[str, int], redis_url: str, ids: Iterator[int], seconds: float,
                   rounds: int, connections: int, client: str) -> dict[str, float]:
    """Mean req/s of each target, loaded in turn for `rounds` rounds after a 1 s warm-up; after
    each load of the service, its worker's backlog is waited for."""
    for target in TARGETS:  # warm-up: connections, caches
        await _load(ports[target], ids, 1.0, connections, client)
        if target == "service":
            await _drained(redis_url)
    rates: dict[str, list[float]] = {target: [] for target in TARGETS}
    for n in range(rounds):
        backlog = 0.0
        for target in TARGETS:
            rates[target].append(await _load(ports[target], ids, seconds, connections, client))
            if target == "service":
                backlog = await _drained(redis_url)
        print(f"{client} round {n + 1}: " + ", ".join(
            f"{target} {rates[target][-1]:.0f} req/s" for target in TARGETS)
            + f" (the service's worker finished its backlog {backlog:.1f} s after its load)",
            flush=True)
    return {target: sum(r) / rounds for target, r in rates.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--client", action="append", choices=CLIENTS,
                        help="load generator, may be repeated (default: raw)")
    args = parser.parse_args()
    clients: list[str] = list(dict.fromkeys(args.client or ["raw"]))
    results: dict[str, dict[str, float]] = {}
    ids = itertools.count(1)
    data = Path(tempfile.mkdtemp(prefix="mwi", dir="/tmp"))
    try:
        with _servers(data) as (ports, redis_url):
            for client in clients:
                results[client] = asyncio.run(_compare(ports, redis_url, ids, args.seconds,
                                                       args.rounds, args.connections, client))
    finally:
        shutil.rmtree(data, ignore_errors=True)
    for client, rate in results.items():
        print(f"ingest /webhook/tg [{client} client]: service {rate['service']:.0f} req/s, "
              f"bare ASGI {rate['bare']:.0f} req/s (ratio {rate['service'] / rate['bare']:.2f}), "
              f"bare + one Redis round trip {rate['bare+redis']:.0f} req/s "
              f"(ratio {rate['service'] / rate['bare+redis']:.2f}), the same batched "
              f"{rate['bare+batch']:.0f} req/s (ratio {rate['service'] / rate['bare+batch']:.2f}) "
              f"({args.connections} connections, {args.rounds}×{args.seconds:g} s each)")


if __name__ == "__main__":
    main()
