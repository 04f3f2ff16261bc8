"""Fixtures for the mailbox side: a fresh Cyrus user per test (its own empty mailbox), a JMAP
client for it, and the app configured for that mailbox; the push responder of push_server.py
(Cyrus has no PushSubscription) and the app configured for it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tests.helpers import FakeClock, FreshUser, closed_port, configure, mailbox_wire, sample_wire
from tests.integration.mailbox.push_server import PushServer
from tests.peers.cyrus import CyrusServer


@pytest.fixture
async def mailbox(fresh: FreshUser) -> FreshUser:
    """A fresh user whose client has fetched its session (the code under test reads
    `client.account_id`)."""
    await fresh.client.get_session()
    return fresh


@pytest.fixture
async def app(
    client: httpx.AsyncClient, cyrus: CyrusServer, mailbox: FreshUser,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[httpx.AsyncClient]:
    """The app, configured for a fresh Cyrus mailbox and switched on (no periodic schedule)."""
    monkeypatch.setenv("SSL_CERT_FILE", str(cyrus.ca_file))
    await configure(client, mailbox_wire(cyrus, mailbox))
    yield client


@pytest.fixture
def clock() -> FakeClock:
    """The push responder's clock: its subscriptions expire only when a test moves it."""
    return FakeClock()


@pytest.fixture
async def server(
    cyrus: CyrusServer, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[PushServer]:
    monkeypatch.setenv("SSL_CERT_FILE", str(cyrus.ca_file))
    async with PushServer(cyrus, clock=clock) as srv:
        yield srv


@pytest.fixture
async def admin(client: httpx.AsyncClient, server: PushServer) -> dict[str, str]:
    """The app configured for the push responder (no periodic reconcile, Telegram a closed
    port) and still switched off; the admin session's headers."""
    wire = sample_wire(jmap_session_url=server.url, reconcile_interval_s=0,
                       telegram_api_base_url=f"http://127.0.0.1:{closed_port()}")
    return await configure(client, wire, enabled=False, applied=True)


@pytest.fixture
async def switched_on(client: httpx.AsyncClient, admin: dict[str, str]) -> None:
    """The app of `admin` switched on: its built-in scheduler runs."""
    enabled = await client.put("/api/enabled", headers=admin, json={"enabled": True})
    assert enabled.status_code == 200, enabled.text
