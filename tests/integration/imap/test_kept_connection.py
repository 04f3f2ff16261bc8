"""Issue #37: the catch-up passes of an IMAP account run on one logged-in connection kept
between them (`mail.imap.kept`), as the service builds them (`services.Peers.watch`), against
the real Dovecot and Cyrus's imapd on the real Redis. The TLS handshakes are counted
client-side (`tests.handshakes`): each is a new connection and login the server saw."""

from __future__ import annotations

import email.message
import email.policy
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from messageweave.config.model import parse_wire
from messageweave.config.outbound import OutboundConfig
from messageweave.services import Peers
from tests.handshakes import counted
from tests.integration.imap.conftest import ImapPeer
from tests.integration.imap.test_idle import imap_wire
from tests.peers.dovecot import DovecotServer
from tests.peers.telegram import TelegramEmulator

ROLES = ("inbox",)
OUTBOUND = OutboundConfig(jmap_timeout_ms=30_000)


def _raw(subject: str) -> bytes:
    msg = email.message.EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "Bob <bob@example.org>", "alice@localhost", subject
    msg.set_content(f"the body of {subject}")
    return msg.as_bytes(policy=email.policy.SMTP)


@pytest.fixture
async def peers(imap_peer: ImapPeer, telegram_emulator: TelegramEmulator
                ) -> AsyncIterator[Peers]:
    """The service's peers for an IMAP wire of `imap_peer`'s user (no I/O until used)."""
    built = Peers()
    await built.apply(parse_wire(imap_wire(imap_peer, telegram_emulator)), OUTBOUND,
                      current=lambda: True)
    try:
        yield built
    finally:
        await built.aclose()


async def test_the_next_catch_up_pass_reuses_the_logged_in_connection(
    imap_peer: ImapPeer, peers: Peers, redis_client: aioredis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches each catch-up pass opening its own connection (TLS, login, LOGOUT: 12–50 ms on
    one machine, paid by the first mail after every quiet spell): two passes make one
    handshake, and the second, on the kept connection, still finds the mail delivered after
    the first."""
    with counted(monkeypatch) as handshakes:
        first = await (await peers.watch(OUTBOUND)).catch_up(redis_client, ROLES)
        assert first.phase == "first_run"
        imap_peer.deliver(_raw("after a quiet spell"))
        second = await (await peers.watch(OUTBOUND)).catch_up(redis_client, ROLES)
        assert second.enqueued == 1
        assert handshakes.done == 1


@pytest.mark.parametrize("imap_peer", ["dovecot-tls"], indirect=True)
async def test_a_kept_connection_the_server_closed_is_replaced(
    imap_peer: ImapPeer, peers: Peers, redis_client: aioredis.Redis, dovecot: DovecotServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches a kept connection used after the server closed it (a restart, its autologout):
    the pass would fail on it instead of logging in again; the NOOP before the lend sees it
    closed and the pass runs on a new connection."""
    with counted(monkeypatch) as handshakes:
        await (await peers.watch(OUTBOUND)).catch_up(redis_client, ROLES)
        dovecot.restart()  # every connection closed by the server
        imap_peer.deliver(_raw("after a restart"))
        second = await (await peers.watch(OUTBOUND)).catch_up(redis_client, ROLES)
        assert second.enqueued == 1
        assert handshakes.done == 2
