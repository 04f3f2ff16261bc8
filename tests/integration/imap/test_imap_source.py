"""`ImapSource`, the reading side and the replies joined over one connection (issue #33): what
the service builds for an IMAP wire. Real Dovecot / Cyrus imapd and the submission sink."""

from __future__ import annotations

import dataclasses

import pytest

from messageweave.config.outbound import OutboundConfig
from messageweave.mail.imap.source import ImapSource
from messageweave.mail.imap.watch import new_imap_client
from messageweave.mail.records import Address
from messageweave.mail.source import MailSource
from messageweave.pipeline.reply import draft_of
from tests.integration.imap.conftest import ImapPeer
from tests.integration.imap.test_reply import config, delivered, mailbox_mails, reached, sink
from tests.peers.smtp import SubmissionSink

__all__ = ["sink"]
pytestmark = pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")


async def test_one_connection_reads_drafts_sends_and_reads_again(
    imap_peer: ImapPeer, sink: SubmissionSink,
) -> None:
    """Catches the two halves of the source stepping on each other's selected mailbox on their
    shared connection (a reply SELECTs Drafts and Sent; the next read must still find the
    mail in INBOX), and a source built from the wire that does not log in as the wire says."""
    subject = f"Shared connection {imap_peer.name}"  # one sink for every peer of the module
    email_id = await delivered(imap_peer, subject)
    both = imap_peer.ca_pem + sink.ca_pem  # imap_ca_pem is trusted for IMAP and SMTP
    cfg = dataclasses.replace(config(imap_peer, sink), imap_ca_pem=both)
    source: MailSource = ImapSource(new_imap_client(cfg, OutboundConfig()), cfg)
    try:
        [meta] = await source.metas([email_id])
        assert meta.subject == subject
        original = await source.reply_source(email_id)
        assert original is not None
        [identity] = await source.identities()
        draft_id = await source.create_draft(draft_of(original, Address(None, identity.email),
                                                      "On my way."))
        assert await source.draft_state(draft_id) == "draft"
        [again] = await source.metas([email_id])  # after the SELECT of Drafts
        assert again.id == email_id
        await source.submit_draft(draft_id, identity.id)
        got = await reached(sink, subject)
        assert got.auth_user == imap_peer.user
        assert await source.draft_state(draft_id) == "sent"
        assert await source.mark_seen(email_id)
        [seen] = await source.metas([email_id])
        assert "$seen" in seen.keywords
        assert any(b"On my way." in raw for _, raw in await mailbox_mails(imap_peer, "\\Sent"))
    finally:
        await source.aclose()
