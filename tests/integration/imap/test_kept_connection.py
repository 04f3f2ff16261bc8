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
from messageweave.store import keys
from tests.handshakes import counted
from tests.helpers import eventually
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


async def _read(peers: Peers, redis: aioredis.Redis, subject: str) -> None:
    """What the worker does with the mail a pass enqueued last: read it over the source's
    connection."""
    [(_, fields)] = await redis.xrevrange(keys.STREAM_JMAP, count=1)
    email_id = (fields.get("email_ids") or fields["email_id"]).split()[-1]
    source = await peers.mail(OUTBOUND)
    [meta] = await source.metas([email_id])
    assert meta.subject == subject


async def test_the_next_catch_up_pass_reuses_the_logged_in_connection(
    imap_peer: ImapPeer, peers: Peers, redis_client: aioredis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches each catch-up pass opening its own connection (TLS, login, LOGOUT: 12–50 ms on
    one machine, paid by the first mail after every quiet spell): two passes and the worker's
    read of the mail the second found make two handshakes (the passes' kept connection, the
    worker's), not three."""
    with counted(monkeypatch) as handshakes:
        first = await (await peers.watch(OUTBOUND)).catch_up(redis_client, ROLES)
        assert first.phase == "first_run"
        imap_peer.deliver(_raw("after a quiet spell"))
        second = await (await peers.watch(OUTBOUND)).catch_up(redis_client, ROLES)
        assert second.enqueued == 1
        await _read(peers, redis_client, "after a quiet spell")
        assert handshakes.done == 2


async def test_a_pass_logs_the_workers_connection_in_ahead_of_its_read(
    imap_peer: ImapPeer, peers: Peers, redis_client: aioredis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches the worker's connection logged in only by its first read, after the pass (the
    first mail after a start paid the login in its notification's path): the pass readies it
    meanwhile, and the read then opens nothing."""
    with counted(monkeypatch) as handshakes:
        await (await peers.watch(OUTBOUND)).catch_up(redis_client, ROLES)  # the first, after start

        async def both_logged_in() -> bool:
            return handshakes.done == 2

        await eventually(both_logged_in, "the worker's connection logged in by the pass")
        imap_peer.deliver(_raw("the first mail"))
        await (await peers.watch(OUTBOUND)).catch_up(redis_client, ROLES)
        await _read(peers, redis_client, "the first mail")
        assert handshakes.done == 2


@pytest.mark.parametrize("imap_peer", ["dovecot-tls"], indirect=True)
async def test_connections_the_server_closed_are_replaced(
    imap_peer: ImapPeer, peers: Peers, redis_client: aioredis.Redis, dovecot: DovecotServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches a kept connection used after the server closed it (a restart, its autologout):
    the pass would fail on it instead of logging in again; the NOOP before the lend sees it
    closed. The worker's connection, closed too, is logged in again and reads the mail."""
    with counted(monkeypatch) as handshakes:
        await (await peers.watch(OUTBOUND)).catch_up(redis_client, ROLES)
        imap_peer.deliver(_raw("before a restart"))
        await (await peers.watch(OUTBOUND)).catch_up(redis_client, ROLES)
        await _read(peers, redis_client, "before a restart")
        assert handshakes.done == 2
        dovecot.restart()  # every connection closed by the server
        imap_peer.deliver(_raw("after a restart"))
        second = await (await peers.watch(OUTBOUND)).catch_up(redis_client, ROLES)
        assert second.enqueued == 1
        await _read(peers, redis_client, "after a restart")
        assert handshakes.done == 4
