"""Fixtures for the mailbox side: a fresh Cyrus user per test (its own empty mailbox), a JMAP
client for it, and the app configured for that mailbox."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tests.helpers import FreshUser, configure, mailbox_wire
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
