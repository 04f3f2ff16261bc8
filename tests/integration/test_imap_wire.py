"""Issue #33: an IMAP wire's mail source is the IMAP one (`Peers.mail`), never a JMAP client kept
or built from the JMAP fields an earlier wire left behind (the runtime would go on reading and
answering from the old mailbox while the page says IMAP). Real Redis, Cyrus and the Bot API
emulator."""

from __future__ import annotations

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.config.live import NotConfigured
from messageweave.config.model import parse_wire
from messageweave.config.outbound import OutboundConfig
from messageweave.mail.imap.source import ImapSource
from messageweave.probes import jmap_session_failure
from messageweave.services import Peers
from tests.helpers import login
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator
from tests.served import peer_wire

IMAP = {"mail_source": "imap", "imap_host": "127.0.0.1", "imap_username": "ada@example.org",
        "imap_password": "imap-password-SECRET"}


async def test_a_switch_to_imap_keeps_no_jmap_client(
    cyrus: CyrusServer, trust_cyrus: None, telegram_emulator: TelegramEmulator,
) -> None:
    """Catches the connected JMAP client kept (its settings are unchanged) or a new one
    connected on demand after the wire switched to IMAP: the mailbox in use would be one the
    configuration no longer names."""
    outbound = OutboundConfig(jmap_timeout_ms=2000)
    jmap = parse_wire(peer_wire(cyrus, telegram_emulator))
    imap = parse_wire({**jmap.to_wire(), **IMAP})
    peers = Peers()
    try:
        assert await peers.apply(jmap, outbound, current=lambda: True) == []
        assert peers.runtime is not None and peers.runtime.jmap is not None
        assert await peers.apply(imap, outbound, current=lambda: True) == []  # no I/O yet
        assert peers.runtime.config is imap and peers.runtime.jmap is None
        with pytest.raises(NotConfigured):
            await peers.jmap(outbound)
        source = await peers.mail(outbound)
        assert isinstance(source, ImapSource) and source.account_id == "ada@example.org"
    finally:
        await peers.aclose()


async def test_an_imap_wire_is_stored_read_back_and_not_ready(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, cyrus: CyrusServer,
    trust_cyrus: None, telegram_emulator: TelegramEmulator,
) -> None:
    """Catches `/ready` passing (by probing the JMAP server an earlier wire named) for a
    configuration whose IMAP server cannot be reached: its `mail` check (the IMAP login) fails;
    and the readback of an IMAP wire showing its password or losing the defaults the page fills
    from."""
    session = await login(client)
    saved = await client.put("/api/business-config", headers=session,
                             json={**peer_wire(cyrus, telegram_emulator), **IMAP})
    assert saved.status_code == 200, saved.text
    assert saved.json()["warnings"] == []  # built without I/O: `/ready` probes the login
    readback = await client.get("/api/business-config", headers=session)
    body = readback.json()
    assert body["values"]["mail_source"] == "imap" and body["values"]["imap_port"] == 993
    assert body["values"]["imap_notify_mailboxes"] == ["INBOX"]
    assert body["values"]["smtp_host"] is None and body["values"]["smtp_security"] == "tls"
    assert body["secrets_present"]["imap_password"] is True
    assert body["secrets_present"]["smtp_password"] is False
    assert "imap-password-SECRET" not in readback.text

    ready = await client.get("/ready")
    assert ready.status_code == 503
    assert ready.headers["x-ready-failed"] == "mail"  # Redis and Telegram answer; port 993 not

    cfg = parse_wire({**peer_wire(cyrus, telegram_emulator), **IMAP})
    failure = await jmap_session_failure(cfg)
    assert failure is not None and failure.detail == "jmap not configured"
