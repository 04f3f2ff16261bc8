"""Fixtures for the mailbox side: a fresh Cyrus user per test (its own empty mailbox), a JMAP
client for it, and a helper that reads what reconcile put in `stalwart:jmap`."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from messageweave.store import keys
from tests.helpers import FreshUser


@pytest.fixture
async def mailbox(fresh: FreshUser) -> FreshUser:
    """A fresh user whose client has fetched its session (the code under test reads
    `client.account_id`)."""
    await fresh.client.get_session()
    return fresh


async def enqueued(redis: aioredis.Redis) -> list[str]:
    """The email ids in `stalwart:jmap`, oldest first (entries must hold exactly the contract's
    two fields)."""
    ids = []
    for _entry_id, fields in await redis.xrange(keys.STREAM_JMAP):
        assert set(fields) == {"account_id", "email_id"}, fields
        ids.append(fields["email_id"])
    return ids
