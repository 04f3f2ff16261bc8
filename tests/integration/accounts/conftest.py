"""Accounts on the served app (issue #35): each a new Cyrus user with its own chat."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from messageweave.store import keys
from messageweave.store.keys import AccountKeys
from tests.helpers import eventually
from tests.peers.cyrus import CyrusServer
from tests.peers.dovecot import DovecotServer
from tests.served import ServedApp

_chats = itertools.count(8_600_001)


@dataclass(frozen=True)
class ServedAccount:
    id: str
    user: str  # its Cyrus (or Dovecot) user
    chat: int
    imap: bool = False

    @property
    def keys(self) -> AccountKeys:
        return AccountKeys(self.id)

    @property
    def cursor(self) -> str:
        """The key its first pass writes (where its mailbox stands)."""
        return self.keys.of(keys.IMAP_CURSOR if self.imap else keys.RECONCILE_CURSOR)


async def add_account(app: ServedApp, cyrus: CyrusServer, account_id: str, *,
                      dovecot: DovecotServer | None = None, **wire: object) -> ServedAccount:
    """A new Cyrus user (or with `dovecot`, a Dovecot user over IMAP) as account `account_id`
    of the served app, with a chat of its own, once the app serves it."""
    user = f"{account_id}x{random.randrange(10**6)}"
    chat = next(_chats)
    body: dict[str, object] = {"id": account_id, "name": account_id.title(),
                               "telegram_chat_id": chat, "chat_allowlist": [chat]}
    if dovecot is None:
        cyrus.add_user(user, f"pw-{user}")
        body.update(jmap_session_url=cyrus.session_url, jmap_username=user,
                    jmap_password=f"pw-{user}")
    else:
        dovecot.add_user(user, f"pw-{user}")
        body.update(mail_source="imap", imap_host="127.0.0.1", imap_port=dovecot.ports.imaps,
                    imap_security="tls", imap_username=user, imap_password=f"pw-{user}",
                    imap_ca_pem=dovecot.ca_file.read_text())
    body.update(wire)
    created = await app.client.post("/api/accounts", headers=app.admin, json=body)
    assert created.status_code == 201, created.text
    svc = app.services

    async def served() -> bool:
        account = svc.accounts.get(account_id)
        return account is not None and account.peers is not None

    await eventually(served, f"account {account_id} served")
    return ServedAccount(account_id, user, chat, imap=dovecot is not None)


async def set_enabled(app: ServedApp, account_id: str, enabled: bool) -> None:
    """Pause or resume an account (`PUT /api/accounts/{id}/enabled`), once the served app's
    registry has seen it."""
    answer = await app.client.put(f"/api/accounts/{account_id}/enabled", headers=app.admin,
                                  json={"enabled": enabled})
    assert answer.status_code == 200, answer.text
    svc = app.services

    async def seen() -> bool:
        served = svc.accounts.get(account_id)
        return served is not None and served.enabled is enabled

    await eventually(seen, f"account {account_id} enabled={enabled} seen by the app")
