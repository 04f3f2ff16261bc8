"""A JMAP server of the test's own on 127.0.0.1 (plain HTTP, asyncio streams): a session
resource whose `eventSourceUrl` is its own, and an event stream that misbehaves as told.

Cyrus cannot be made to send any of these (its stream is pings and StateChanges it builds
itself, and it never sends `EmailDelivery`, even for `types=*`: checked against the harness's
Cyrus 3.6), so the faults come from here. Each behaviour is one coroutine writing the stream:

- `endless_line`: `data: ` and then bytes with no line end, up to `LIMIT_BYTES`;
- `endless_data`: `data:` lines that never reach the blank line that ends an event, up to
  `LIMIT_BYTES`;
- `accept_close`: the 200 event-stream head, then the connection closed at once;
- `scripted`: the head, then each event put in `events` (bytes), then held open.

Each connection to the stream is recorded (`connections`): when it opened, how many bytes of
stream were written to it, and whether the client hung up. A writer that reaches its limit
holds the connection open and silent (the client's own limits must end it first).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

ACCOUNT = "hostile-account"
LIMIT_BYTES = 64 * 1024 * 1024  # what a writer sends at most, if the client never hangs up
CHUNK = b"x" * 65536
HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        b"Connection: close\r\n\r\n")


@dataclass
class Connection:
    opened: float
    written: int = 0
    closed_by_client: asyncio.Event = field(default_factory=asyncio.Event)


Writer = Callable[["HostileEventSource", asyncio.StreamWriter, Connection], Awaitable[None]]


async def _send(writer: asyncio.StreamWriter, conn: Connection, data: bytes) -> None:
    writer.write(data)
    await writer.drain()
    conn.written += len(data)


async def endless_line(server: HostileEventSource, writer: asyncio.StreamWriter,
                       conn: Connection) -> None:
    await _send(writer, conn, b"data: ")
    while conn.written < LIMIT_BYTES:
        await _send(writer, conn, CHUNK)


async def endless_data(server: HostileEventSource, writer: asyncio.StreamWriter,
                       conn: Connection) -> None:
    line = b"data: " + CHUNK[:1000] + b"\n"
    lines = line * 64
    while conn.written < LIMIT_BYTES:
        await _send(writer, conn, lines)


async def accept_close(server: HostileEventSource, writer: asyncio.StreamWriter,
                       conn: Connection) -> None:
    """Marks the behaviour: `_stream` closes right after the head."""


async def scripted(server: HostileEventSource, writer: asyncio.StreamWriter,
                   conn: Connection) -> None:
    while True:
        await _send(writer, conn, await server.events.get())


def state_event(changed: dict[str, dict[str, str]]) -> bytes:
    body = json.dumps({"@type": "StateChange", "changed": changed})
    return f"event: state\ndata: {body}\n\n".encode()


class HostileEventSource:
    """`async with HostileEventSource(behaviour) as server:`; `server.url` is the session URL."""

    def __init__(self, behaviour: Writer, *, event_source_origin: str | None = None) -> None:
        self.behaviour = behaviour
        self.event_source_origin = event_source_origin  # None: the session's own
        self.connections: list[Connection] = []
        self.paths: list[str] = []  # of every request, in order
        self.connected = asyncio.Condition()
        self.events: asyncio.Queue[bytes] = asyncio.Queue()
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/.well-known/jmap"

    def session(self) -> dict[str, Any]:
        origin = f"http://127.0.0.1:{self.port}"
        return {
            "capabilities": {"urn:ietf:params:jmap:core": {},
                             "urn:ietf:params:jmap:mail": {}},
            "accounts": {ACCOUNT: {"name": "hostile", "isPersonal": True,
                                   "accountCapabilities": {"urn:ietf:params:jmap:mail": {}}}},
            "primaryAccounts": {"urn:ietf:params:jmap:mail": ACCOUNT},
            "username": "hostile", "apiUrl": origin + "/api", "state": "1",
            "eventSourceUrl": (self.event_source_origin or origin)
            + "/es?types={types}&closeafter={closeafter}&ping={ping}",
        }

    async def __aenter__(self) -> HostileEventSource:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        # Python 3.11's server leaves its handlers running: one still holding a stream open
        # would be destroyed pending when the test's loop closes (an unraisable warning).
        for task in self._handlers:
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 5)

    async def until_connections(self, n: int, timeout_s: float = 15.0) -> None:
        async with self.connected:
            await asyncio.wait_for(
                self.connected.wait_for(lambda: len(self.connections) >= n), timeout_s)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1].decode()
            self.paths.append(path)
            if path.startswith("/es"):
                await self._stream(reader, writer)
            else:
                body = json.dumps(self.session()).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
                             + body)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _stream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(time.monotonic())
        async with self.connected:
            self.connections.append(conn)
            self.connected.notify_all()
        writer.write(HEAD)
        await writer.drain()

        async def hung_up() -> None:
            await reader.read()  # the client sends nothing more: EOF is its hang-up
            conn.closed_by_client.set()

        if self.behaviour is accept_close:
            return
        watch = asyncio.create_task(hung_up())
        try:
            await self.behaviour(self, writer, conn)
            await watch  # a writer that stopped holds the connection until the client leaves
        except ConnectionError:
            conn.closed_by_client.set()
        finally:
            watch.cancel()
