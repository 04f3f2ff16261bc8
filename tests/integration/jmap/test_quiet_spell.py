"""Issue #37: the first mail after a quiet spell. The catch-up a push starts after some seconds
without mail must not open a new TLS connection to the JMAP server (50–100 ms on Cyrus, where a
request on a kept connection takes 3–7 ms). Real Cyrus; the handshakes counted client-side."""

from __future__ import annotations

import asyncio

import pytest

from messageweave.mail.jmap import JmapClient
from tests.handshakes import counted
from tests.helpers import CYRUS_PASSWORD, CYRUS_USER
from tests.peers.cyrus import CyrusServer

QUIET_S = 6  # longer than httpx's default keepalive_expiry (5 s)


async def test_a_request_after_a_quiet_spell_reuses_the_connection(
    cyrus: CyrusServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches the JMAP client's pool dropping its connection after 5 s idle (httpx's default):
    every catch-up after a quiet spell paid a new TLS connection; two requests 6 s apart must
    make one handshake. The 6 s wait is the quiet spell itself, not a timing assertion."""
    with counted(monkeypatch) as handshakes:
        async with JmapClient(cyrus.session_url, CYRUS_USER, CYRUS_PASSWORD,
                              ca_file=cyrus.ca_file, timeout=10) as client:
            await client.get_session()
            assert handshakes.done == 1
            await asyncio.sleep(QUIET_S)
            await client.get_session(refresh=True)
            assert handshakes.done == 1
