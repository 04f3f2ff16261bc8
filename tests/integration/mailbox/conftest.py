"""Fixtures for the mailbox side: a fresh Cyrus user per test (its own empty mailbox), a JMAP
client for it, and a helper that reads what reconcile put in `stalwart:jmap`."""

from __future__ import annotations

import itertools
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import redis.asyncio as aioredis

from messageweave.mail.jmap import JmapClient
from messageweave.store import keys
from tests.peers.cyrus import CyrusServer

_counter = itertools.count()


@dataclass
class Mailbox:
    user: str
    password: str
    client: JmapClient


@pytest.fixture
async def mailbox(cyrus: CyrusServer) -> AsyncIterator[Mailbox]:
    """A new Cyrus user with an empty mailbox (INBOX, Drafts, Sent, Junk, Trash)."""
    user = f"mb{next(_counter)}x{random.randrange(10**6)}"
    password = f"pw-{user}"
    cyrus.add_user(user, password)
    async with JmapClient(cyrus.session_url, user, password, ca_file=cyrus.ca_file,
                          timeout=10) as client:
        await client.get_session()
        yield Mailbox(user, password, client)


async def enqueued(redis: aioredis.Redis) -> list[str]:
    """The email ids in `stalwart:jmap`, oldest first (entries must hold exactly the contract's
    two fields)."""
    ids = []
    for _entry_id, fields in await redis.xrange(keys.STREAM_JMAP):
        assert set(fields) == {"account_id", "email_id"}, fields
        ids.append(fields["email_id"])
    return ids
