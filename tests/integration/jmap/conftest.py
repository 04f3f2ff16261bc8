"""Fixtures: one real Cyrus JMAP server for the whole test session, and clients for it.

The server (tests/peers/cyrus.py) starts in about half a second. Without the Cyrus packages the
`cyrus` fixture FAILS (it never skips): run `sudo scripts/install-test-packages.sh`.

All tests share the user alice, so they never assume an empty mailbox: each one works with the
messages it appends (unique subjects and tokens) and with state deltas. Tests that need a mailbox
of their own take the `fresh` fixture (tests/conftest.py): a new user.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import ssl
import string
from collections.abc import AsyncIterator, Callable

import pytest

from messageweave.mail.jmap import JmapClient
from tests.helpers import CYRUS_PASSWORD as PASSWORD
from tests.helpers import CYRUS_USER as USER
from tests.helpers import RecordingTransport
from tests.peers.cyrus import CyrusServer


@pytest.fixture
async def client(cyrus: CyrusServer) -> AsyncIterator[JmapClient]:
    async with JmapClient(
        cyrus.session_url, USER, PASSWORD, ca_file=cyrus.ca_file, timeout=10
    ) as c:
        yield c


@pytest.fixture
async def recorded(cyrus: CyrusServer) -> AsyncIterator[tuple[JmapClient, RecordingTransport]]:
    """A client whose HTTP requests are recorded, to count round trips."""
    transport = RecordingTransport(cyrus.ssl_context())
    async with JmapClient(cyrus.session_url, USER, PASSWORD, timeout=10, transport=transport) as c:
        yield c, transport


@pytest.fixture
def token() -> str:
    """A word no other message contains (letters only, so the indexer keeps it whole)."""
    return "zq" + "".join(random.choices(string.ascii_lowercase, k=10))


Reply = tuple[int, dict[str, str], bytes]


class TinyServer:
    """A minimal HTTP(S)/1.1 server on 127.0.0.1 for failure modes Cyrus cannot show
    (cross-origin redirects, silence). `reply(method, path)` gives (status, headers, body);
    None means: accept and never answer."""

    def __init__(
        self, reply: Callable[[str, str], Reply | None], tls: ssl.SSLContext | None
    ) -> None:
        self._reply = reply
        self._tls = tls
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self._server: asyncio.Server | None = None
        self._hung: list[asyncio.StreamWriter] = []
        self.port = 0

    @property
    def origin(self) -> str:
        return f"{'https' if self._tls else 'http'}://127.0.0.1:{self.port}"

    async def __aenter__(self) -> TinyServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self._tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for w in self._hung:
            w.close()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            writer.close()
            return
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {
            k.strip().lower(): v.strip()
            for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)
        }
        self.requests.append((method, path, headers))
        reply = self._reply(method, path)
        if reply is None:
            self._hung.append(writer)
            return
        status, extra, body = reply
        out = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}", "Connection: close"]
        out += [f"{k}: {v}" for k, v in extra.items()]
        writer.write(("\r\n".join(out) + "\r\n\r\n").encode() + body)
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.drain()
        writer.close()


@pytest.fixture
def tiny_https(cyrus: CyrusServer) -> Callable[[Callable[[str, str], Reply | None]], TinyServer]:
    """Make a TinyServer with the Cyrus test certificate (so clients trust it via ca_file)."""

    def make(reply: Callable[[str, str], Reply | None]) -> TinyServer:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(cyrus.server_cert, cyrus.server_key)
        return TinyServer(reply, tls)

    return make
