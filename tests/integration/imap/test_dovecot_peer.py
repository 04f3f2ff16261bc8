"""The Dovecot test peer offers what the IMAP tests rely on, and fails (never skips) when the
packages are missing."""

from __future__ import annotations

import imaplib
from pathlib import Path

import pytest

from tests.peers import dovecot as dovecot_peer
from tests.peers.cyrus import make_message
from tests.peers.dovecot import HOST, DovecotNotInstalled, DovecotServer

NEEDED = {"IDLE", "CONDSTORE", "QRESYNC", "MOVE", "UIDPLUS", "SPECIAL-USE", "ENABLE", "ESEARCH"}


def test_dovecot_offers_tls_starttls_special_use_and_lmtp_and_keeps_mail_over_a_restart(
    dovecot: DovecotServer,
) -> None:
    """Catches a peer that silently lacks what the IMAP client tests need: an extension not
    advertised, a listener without TLS, a special-use mailbox missing, LMTP mail not landing,
    or a restart that loses the mail (the reconnect tests bounce the server)."""
    dovecot.add_user("peer-check", "pw-peer")
    dovecot.deliver(make_message(subject="over lmtp"), "peer-check")
    with dovecot.imap("peer-check") as m:
        _, caps = m.capability()
        assert NEEDED <= set(caps[0].decode().split())
        _, listed = m.list()
        text = b" ".join(x for x in listed if isinstance(x, bytes)).decode()
        for name, flag in dovecot_peer.SPECIAL_USE.items():
            assert f"({flag}" in text or f" {flag}" in text, (name, text)
    m = imaplib.IMAP4(HOST, dovecot.ports.imap, timeout=10)
    m.starttls(ssl_context=dovecot.ssl_context())
    m.login("peer-check", "pw-peer")
    m.logout()
    dovecot.restart()
    assert len(dovecot.uids("peer-check")) == 1


def test_missing_unpacked_imapd_is_an_error_that_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Catches a Dovecot fixture that skips (or dies with a bare FileNotFoundError) when
    dovecot-imapd was never unpacked: the suite must fail and name the install script."""
    monkeypatch.setattr(dovecot_peer, "IMAPD_CACHE", tmp_path / "nothing-here")
    with pytest.raises(DovecotNotInstalled, match=r"install-test-packages"):
        DovecotServer(tmp_path / "srv").start()
