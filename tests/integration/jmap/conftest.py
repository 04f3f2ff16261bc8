"""Fixtures: one real Cyrus JMAP server for the whole test session, and clients for it.

The server (tests/peers/cyrus.py) starts in about half a second. Without the Cyrus packages the
`cyrus` fixture FAILS (it never skips): run `sudo scripts/install-test-packages.sh`.

All tests share the user alice, so they never assume an empty mailbox: each one works with the
messages it appends (unique subjects and tokens) and with state deltas. Tests that need a mailbox
of their own take the `fresh` fixture (tests/conftest.py): a new user.
"""

from __future__ import annotations

import random
import ssl
import string
from collections.abc import AsyncIterator, Callable

import pytest

from messageweave.mail.jmap import JmapClient
from tests.helpers import CYRUS_PASSWORD as PASSWORD
from tests.helpers import CYRUS_USER as USER
from tests.helpers import RecordingTransport, Reply, TinyServer
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


@pytest.fixture
def tiny_https(cyrus: CyrusServer) -> Callable[[Callable[[str, str], Reply | None]], TinyServer]:
    """Make a TinyServer with the Cyrus test certificate (so clients trust it via ca_file)."""

    def make(reply: Callable[[str, str], Reply | None]) -> TinyServer:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(cyrus.server_cert, cyrus.server_key)
        return TinyServer(reply, tls)

    return make
