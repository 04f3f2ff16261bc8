"""The comparison servers of the benchmarks (not a test): bare ASGI apps under the service's own
HTTP server (`messageweave.server.serve`: the same protocol class, loop and read limits).

    .venv/bin/python -m bench.bare PORT            # answers every request 204, reads nothing
    .venv/bin/python -m bench.bare PORT --redis    # reads the body, one XADD, then 204
    .venv/bin/python -m bench.bare PORT --redis --batched   # the XADDs of a burst together

- `bare_app` is the floor: no routing, no middleware, no body read.
- `redis_app` does the least a webhook that queues its update must do: read the whole body and
  make one Redis round trip (an `XADD` of the body to `bench:ingest`, trimmed to ~10,000
  entries, on one `redis.asyncio` client from `REDIS_URL`), then answer 204.
- with `--batched`, the XADDs of the requests waiting at one moment go in one pipelined round
  trip (`aio.Batcher`, as the service's `UpdateIngress` does): the least such a webhook must do.

This module imports only the server and redis-py, so an idle one is also the memory floor of
`bench/rss.py`.
"""

from __future__ import annotations

import argparse
import os

import redis.asyncio as aioredis
from starlette.types import ASGIApp, Receive, Scope, Send

from messageweave import server
from messageweave.aio import Batcher

STREAM = "bench:ingest"
_TRIM = 10_000


async def _lifespan(receive: Receive, send: Send) -> None:
    while (await receive())["type"] != "lifespan.shutdown":
        await send({"type": "lifespan.startup.complete"})
    await send({"type": "lifespan.shutdown.complete"})


async def _no_content(send: Send) -> None:
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


async def bare_app(scope: Scope, receive: Receive, send: Send) -> None:
    """The floor: an answer with no routing, no middleware, no body read."""
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
        return
    await _no_content(send)


def make_redis_app(redis_url: str, batched: bool = False) -> ASGIApp:
    """A bare endpoint that reads the body and makes one Redis round trip before its 204
    (`batched`: one round trip for the bodies of all the requests waiting at that moment)."""
    client = aioredis.from_url(redis_url)

    async def add_all(bodies: list[bytes]) -> list[object]:
        async with client.pipeline(transaction=False) as pipe:
            for body in bodies:
                pipe.xadd(STREAM, {"u": body}, maxlen=_TRIM, approximate=True)
            return list(await pipe.execute())

    batcher: Batcher[bytes, object] = Batcher(add_all, 64)

    async def redis_app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            await client.aclose()
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        if batched:
            await batcher.submit(body)
        else:
            await client.xadd(STREAM, {"u": body}, maxlen=_TRIM, approximate=True)
        await _no_content(send)

    return redis_app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--redis", action="store_true", help="one XADD per request (REDIS_URL)")
    parser.add_argument("--batched", action="store_true",
                        help="with --redis: the XADDs of a burst in one round trip")
    args = parser.parse_args()
    app: ASGIApp = (make_redis_app(os.environ["REDIS_URL"], args.batched) if args.redis
                    else bare_app)
    server.serve(app, "127.0.0.1", args.port)


if __name__ == "__main__":
    main()
