"""Accounts on the served app (issue #35): each a new Cyrus user with its own chat."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from messageweave.store.keys import AccountKeys
from tests.helpers import eventually
from tests.peers.cyrus import CyrusServer
from tests.served import ServedApp

_chats = itertools.count(8_600_001)


@dataclass(frozen=True)
class ServedAccount:
    id: str
    user: str  # its Cyrus user
    chat: int

    @property
    def keys(self) -> AccountKeys:
        return AccountKeys(self.id)


async def add_account(app: ServedApp, cyrus: CyrusServer, account_id: str,
                      **wire: object) -> ServedAccount:
    """A new Cyrus user as account `account_id` of the served app, with a chat of its own,
    once the app serves it."""
    user = f"{account_id}x{random.randrange(10**6)}"
    cyrus.add_user(user, f"pw-{user}")
    chat = next(_chats)
    body = {"id": account_id, "name": account_id.title(), "telegram_chat_id": chat,
            "chat_allowlist": [chat], "jmap_session_url": cyrus.session_url,
            "jmap_username": user, "jmap_password": f"pw-{user}", **wire}
    created = await app.client.post("/api/accounts", headers=app.admin, json=body)
    assert created.status_code == 201, created.text
    svc = app.services

    async def served() -> bool:
        account = svc.accounts.get(account_id)
        return account is not None and account.peers is not None

    await eventually(served, f"account {account_id} served")
    return ServedAccount(account_id, user, chat)
