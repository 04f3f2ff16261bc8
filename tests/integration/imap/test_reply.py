"""Replying on an IMAP mailbox (issue #33 item 4, SPEC F.3): `mail.imap.reply.ImapReplies` on a
real Dovecot and Cyrus's imapd, sent through `mail.smtp` to the submission sink (AUTH over
implicit TLS or STARTTLS, `tests/peers/smtp.py`)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from messageweave.config.model import BusinessConfig, parse_wire
from messageweave.mail import smtp
from messageweave.mail.errors import MailAuthError, MailRefused, MailUnreachable
from messageweave.mail.imap import ImapClient, ImapTransportError
from messageweave.mail.imap import reply as imap_reply
from messageweave.mail.imap.ids import mail_id
from messageweave.mail.imap.reply import SENDING, ImapReplies
from messageweave.mail.records import Address, Draft
from messageweave.pipeline.reply import draft_of
from tests.integration.imap.conftest import ImapPeer
from tests.peers.smtp import REFUSED_DOMAIN, Received, SubmissionSink, running_submission
from tests.unit.test_config_imap_fields import imap_wire

# The sink's implicit-TLS listener requires AUTH without aiosmtpd's STARTTLS-only TLS check
# (`tests/peers/smtp.py`); aiosmtpd warns about it on every connection.
pytestmark = pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")

ORIGINAL_ID = "orig-1@example.org"
ROOT_ID = "root-0@example.org"


@pytest.fixture(scope="module")
def sink() -> Iterator[SubmissionSink]:
    with running_submission() as server:
        yield server


class Replies(ImapReplies):
    """The host `ImapReader` will be: a fresh connection per call, and the configuration."""

    def __init__(self, peer: ImapPeer, cfg: BusinessConfig) -> None:
        self.peer, self.cfg = peer, cfg

    @asynccontextmanager
    async def _imap(self) -> AsyncIterator[ImapClient]:
        async with self.peer.client() as client:
            yield client

    def _mail_config(self) -> BusinessConfig:
        return self.cfg


def config(peer: ImapPeer, sink: SubmissionSink, *, security: str = "tls",
           **overrides: Any) -> BusinessConfig:
    sink.users[peer.user] = peer.password
    port = sink.tls_port if security == "tls" else sink.starttls_port
    return parse_wire(imap_wire(
        imap_host="127.0.0.1", imap_port=peer.port, imap_security=peer.security,
        imap_username=peer.user, imap_password=peer.password, imap_ca_pem=sink.ca_pem,
        smtp_host="127.0.0.1", smtp_port=port, smtp_security=security,
        smtp_from=f"{peer.user}@example.org", **overrides))


def original(peer: ImapPeer, subject: str) -> bytes:
    return (f"From: Bob <bob@example.org>\r\nTo: {peer.user}@example.org\r\n"
            f"Subject: {subject}\r\nMessage-ID: <{ORIGINAL_ID}>\r\n"
            f"References: <{ROOT_ID}>\r\nDate: Sat, 05 Dec 2026 07:00:00 +0000\r\n\r\n"
            "Are you in?\r\n").encode()


async def delivered(peer: ImapPeer, subject: str) -> str:
    peer.deliver(original(peer, subject))
    async with peer.client() as client:
        state = await client.select("INBOX", readonly=True)
        [uid] = await client.uid_search("ALL")
    return mail_id("INBOX", state.uidvalidity, uid)


async def drafted(replies: Replies, email_id: str, text: str = "Yes, I'm in.") -> str:
    source = await replies.reply_source(email_id)
    assert source is not None
    [identity] = await replies.identities()
    return await replies.create_draft(draft_of(source, Address("Ada", identity.email), text))


async def mailbox_mails(peer: ImapPeer, attribute: str) -> list[tuple[set[str], bytes]]:
    """(flags, bytes) of every mail of the mailbox marked `attribute`, not `\\Deleted`."""
    async with peer.client() as client:
        name = await client.special_use(attribute)
        assert name is not None
        await client.select(name, readonly=True)
        uids = await client.uid_search("NOT", "DELETED")
        found = await client.uid_fetch(uids, ["UID", "FLAGS", "BODY.PEEK[]"]) if uids else {}
    return [(set(f.flags or ()), f.sections["BODY[]"] or b"") for f in found.values()]


def to_bob(subject: str) -> Any:
    return lambda r: r.rcpt_tos == ("bob@example.org",) and subject in r.raw.decode()


async def reached(sink: SubmissionSink, subject: str) -> Received:
    [got] = await asyncio.to_thread(sink.wait_for, to_bob(subject))
    return got


async def test_a_reply_draft_is_stored_in_drafts_with_its_threading_headers(
    imap_peer: ImapPeer, sink: SubmissionSink,
) -> None:
    """Catches a reply draft that is not in the account's `\\Drafts` with `\\Draft \\Seen`,
    or that lost In-Reply-To / References (the reply would start a new thread), or the
    original's addresses read wrong (the reply to the wrong person)."""
    replies = Replies(imap_peer, config(imap_peer, sink))
    email_id = await delivered(imap_peer, "Lunch on Friday?")
    source = await replies.reply_source(email_id)
    assert source is not None
    assert [(a.name, a.email) for a in source.sender] == [("Bob", "bob@example.org")]
    assert (source.subject, source.message_ids, source.references) == \
        ("Lunch on Friday?", (ORIGINAL_ID,), (ROOT_ID,))
    draft_id = await drafted(replies, email_id)
    [(flags, raw)] = await mailbox_mails(imap_peer, "\\Drafts")
    assert {"\\Draft", "\\Seen"} <= flags
    assert f"In-Reply-To: <{ORIGINAL_ID}>".encode() in raw
    assert f"References: <{ROOT_ID}> <{ORIGINAL_ID}>".encode() in raw
    assert b"Subject: Re: Lunch on Friday?" in raw and b"To: Bob <bob@example.org>" in raw
    assert await replies.draft_state(draft_id) == "draft"
    assert sink.matching(to_bob("Lunch on Friday?")) == []


@pytest.mark.parametrize("security", ["tls", "starttls"])
async def test_send_reaches_the_submission_server_once_and_files_the_reply_in_sent(
    imap_peer: ImapPeer, sink: SubmissionSink, security: str,
) -> None:
    """Catches a Send that does not reach the recipient through authenticated submission (or
    over either TLS), sends other bytes than the draft's, loses In-Reply-To / References, the
    wrong envelope, no copy in `\\Sent` with `\\Seen`, or the draft left in Drafts."""
    replies = Replies(imap_peer, config(imap_peer, sink, security=security))
    subject = f"Dinner {imap_peer.name} {security}"
    draft_id = await drafted(replies, await delivered(imap_peer, subject))
    [(_, draft_raw)] = await mailbox_mails(imap_peer, "\\Drafts")
    assert await replies.submit_draft(draft_id, "smtp") is not None
    got = await reached(sink, subject)
    assert (got.mail_from, got.auth_user) == (f"{imap_peer.user}@example.org", imap_peer.user)
    assert got.raw.rstrip(b"\r\n") == draft_raw.rstrip(b"\r\n")
    assert got.message["In-Reply-To"] == f"<{ORIGINAL_ID}>"
    assert got.message["References"] == f"<{ROOT_ID}> <{ORIGINAL_ID}>"
    [(flags, sent_raw)] = await mailbox_mails(imap_peer, "\\Sent")
    assert "\\Seen" in flags and draft_raw.rstrip(b"\r\n") in sent_raw
    assert await mailbox_mails(imap_peer, "\\Drafts") == []
    assert await replies.draft_state(draft_id) == "sent"
    assert len(sink.matching(to_bob(subject))) == 1


async def test_a_wrong_smtp_password_is_an_auth_error_and_sends_nothing(
    imap_peer: ImapPeer, sink: SubmissionSink,
) -> None:
    """Catches a refused SMTP login taken for an unreachable server (retried forever instead
    of saying the password is wrong), the password in the error, or a draft left marked as
    being sent (a second press would then say "sent" for a reply nobody got)."""
    replies = Replies(imap_peer, config(imap_peer, sink, smtp_password="wrong-secret-42"))
    subject = f"Wrong password {imap_peer.name}"
    draft_id = await drafted(replies, await delivered(imap_peer, subject))
    with pytest.raises(MailAuthError) as info:
        await replies.submit_draft(draft_id, "smtp")
    assert "wrong-secret-42" not in repr(info.value) and info.value.__cause__ is None
    assert sink.matching(to_bob(subject)) == []
    [(flags, _)] = await mailbox_mails(imap_peer, "\\Drafts")
    assert SENDING not in flags
    assert await replies.draft_state(draft_id) == "draft"
    assert await mailbox_mails(imap_peer, "\\Sent") == []


async def test_a_refused_recipient_is_refused_and_sends_nothing(
    imap_peer: ImapPeer, sink: SubmissionSink,
) -> None:
    """Catches a recipient the submission server refuses (550) taken for an outage (retried
    for good), or the reply sent to the other recipients anyway, or the draft left marked as
    being sent (a second press would say "sent")."""
    replies = Replies(imap_peer, config(imap_peer, sink))
    draft = Draft(Address("Ada", f"{imap_peer.user}@example.org"),
                  (Address(None, "bob@example.org"), Address(None, f"x@{REFUSED_DOMAIN}")),
                  f"Re: refused {imap_peer.name}", (ORIGINAL_ID,), (), "Hi")
    draft_id = await replies.create_draft(draft)
    with pytest.raises(MailRefused) as info:
        await replies.submit_draft(draft_id, "smtp")
    assert info.value.reason == "SMTP 550"
    assert sink.matching(to_bob(f"refused {imap_peer.name}")) == []
    assert not [r for r in sink.received if f"refused {imap_peer.name}" in r.raw.decode()]
    assert await replies.draft_state(draft_id) == "draft"
    assert await mailbox_mails(imap_peer, "\\Sent") == []


@pytest.mark.parametrize("field", ["subject", "to", "name"])
async def test_a_header_value_with_cr_lf_is_refused_and_nothing_is_stored(
    imap_peer: ImapPeer, sink: SubmissionSink, field: str,
) -> None:
    """Catches a CR/LF in a draft's subject, recipient or name that becomes a header of its
    own (a `Bcc:` the owner never saw) in the mail stored and sent."""
    replies = Replies(imap_peer, config(imap_peer, sink))
    evil = "x\r\nBcc: eve@evil.example"
    draft = Draft(Address("Ada", f"{imap_peer.user}@example.org"),
                  (Address(None, "bob@example.org"),), "Re: hello", (ORIGINAL_ID,), (), "Hi")
    if field == "subject":
        draft = dataclasses.replace(draft, subject=evil)
    elif field == "to":
        draft = dataclasses.replace(draft, to=(Address(None, "bob@example.org" + evil[1:]),))
    else:
        draft = dataclasses.replace(draft, sender=Address(evil, draft.sender.email))
    with pytest.raises(MailRefused):
        await replies.create_draft(draft)
    assert await mailbox_mails(imap_peer, "\\Drafts") == []


async def test_a_hostile_original_adds_no_header_to_the_reply_or_recipient_to_the_send(
    imap_peer: ImapPeer, sink: SubmissionSink, caplog: pytest.LogCaptureFixture,
) -> None:
    """Catches a sender's display name or subject whose encoded CR/LF (`=0D=0A` in an RFC 2047
    word) becomes a `Bcc:` header in the draft and a recipient of the Send, or the SMTP
    password in a log line."""
    replies = Replies(imap_peer, config(imap_peer, sink))
    evil = "=?utf-8?q?x=0D=0ABcc:_eve@evil.example?="
    imap_peer.deliver((
        f"From: {evil} <bob@example.org>\r\nTo: {imap_peer.user}@example.org\r\n"
        f"Subject: Hostile {imap_peer.name} {evil}\r\nMessage-ID: <{ORIGINAL_ID}>\r\n"
        "\r\nHi\r\n").encode())
    async with imap_peer.client() as client:
        state = await client.select("INBOX", readonly=True)
        [uid] = await client.uid_search("ALL")
    draft_id = await drafted(replies, mail_id("INBOX", state.uidvalidity, uid))
    [(_, raw)] = await mailbox_mails(imap_peer, "\\Drafts")
    assert not any(line.lower().startswith(b"bcc") for line in raw.split(b"\r\n"))
    await replies.submit_draft(draft_id, "smtp")
    got = await reached(sink, f"Hostile {imap_peer.name}")
    assert got.rcpt_tos == ("bob@example.org",) and got.message["Bcc"] is None
    assert not [r for r in caplog.records if imap_peer.password in r.getMessage()]


async def test_a_lost_smtp_answer_is_not_sent_again(
    imap_peer: ImapPeer, sink: SubmissionSink, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches a retried Send (the first one's message taken by the server, its 250 lost)
    that sends the reply a second time. A test double at the SMTP seam: the real send runs,
    then its answer is lost; a server that takes a message and drops the connection before
    its reply cannot be made on demand with aiosmtpd."""
    replies = Replies(imap_peer, config(imap_peer, sink))
    subject = f"Lost answer {imap_peer.name}"
    draft_id = await drafted(replies, await delivered(imap_peer, subject))
    real_send = smtp.send_message

    async def answer_lost(*args: Any) -> None:
        await real_send(*args)
        raise smtp.SmtpUncertain("SMTP: no answer to the message (test double)")

    monkeypatch.setattr(smtp, "send_message", answer_lost)
    with pytest.raises(MailUnreachable):
        await replies.submit_draft(draft_id, "smtp")
    monkeypatch.setattr(smtp, "send_message", real_send)
    # The retry, as `pipeline.draft.send` makes it: the state first, the submission only for
    # a "draft"; and a submission asked for anyway sends nothing either.
    assert await replies.draft_state(draft_id) == "sent"
    assert await replies.submit_draft(draft_id, "smtp") is None
    await reached(sink, subject)
    assert len(sink.matching(to_bob(subject))) == 1


async def test_a_send_whose_sent_copy_was_lost_is_finished_by_the_retry_not_resent(
    imap_peer: ImapPeer, sink: SubmissionSink, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches a Send accepted by SMTP whose IMAP connection then broke (no Sent copy, the
    draft left) being sent again by the retry, or never filed in Sent. A test double raises
    the broken connection at the filing step: a real one cannot be cut on demand between
    the SMTP answer and the APPEND."""
    replies = Replies(imap_peer, config(imap_peer, sink))
    subject = f"Sent copy lost {imap_peer.name}"
    draft_id = await drafted(replies, await delivered(imap_peer, subject))

    async def broken(*args: Any, **kwargs: Any) -> None:
        raise ImapTransportError("the connection closed (test double)")

    real_file = imap_reply._file_sent
    monkeypatch.setattr(imap_reply, "_file_sent", broken)
    with pytest.raises(MailUnreachable):
        await replies.submit_draft(draft_id, "smtp")
    monkeypatch.setattr(imap_reply, "_file_sent", real_file)
    assert await replies.draft_state(draft_id) == "sent"
    [(flags, _)] = await mailbox_mails(imap_peer, "\\Sent")
    assert "\\Seen" in flags
    assert await mailbox_mails(imap_peer, "\\Drafts") == []
    assert await replies.draft_state(draft_id) == "sent"
    await reached(sink, subject)
    assert len(sink.matching(to_bob(subject))) == 1


async def test_cancel_removes_only_that_draft(imap_peer: ImapPeer, sink: SubmissionSink
                                             ) -> None:
    """Catches a Cancel that leaves the draft in Drafts, removes another draft instead of or
    with it, fails on a draft already gone, or a removed draft still read as one."""
    replies = Replies(imap_peer, config(imap_peer, sink))
    email_id = await delivered(imap_peer, "Two drafts")
    first = await drafted(replies, email_id, "First answer")
    second = await drafted(replies, email_id, "Second answer")
    await replies.destroy_draft(first)
    await replies.destroy_draft(first)  # gone already: nothing happens
    [(_, raw)] = await mailbox_mails(imap_peer, "\\Drafts")
    assert b"Second answer" in raw
    assert (await replies.draft_state(first), await replies.draft_state(second)) == \
        (None, "draft")
    assert sink.matching(to_bob("Two drafts")) == []


# --- SMTP alone: "Test connection" --------------------------------------------------------


@pytest.mark.parametrize("security", ["tls", "starttls"])
async def test_login_check_authenticates_without_sending(sink: SubmissionSink,
                                                         security: str) -> None:
    """Catches "Test connection" that sends a mail, or passes with a wrong password, or shows
    the password in its error."""
    sink.users["check"] = "pw-check"
    port = sink.tls_port if security == "tls" else sink.starttls_port
    good = smtp.SmtpSettings("127.0.0.1", port, security, "check", "pw-check", sink.ca_pem)
    before = len(sink.received)
    await smtp.login_check(good)
    with pytest.raises(smtp.SmtpAuthError) as info:
        await smtp.login_check(dataclasses.replace(good, password="not-it-77"))
    assert "not-it-77" not in str(info.value) and "not-it-77" not in repr(good)
    assert len(sink.received) == before


async def test_an_untrusted_smtp_certificate_is_unreachable_not_sent(sink: SubmissionSink
                                                                     ) -> None:
    """Catches a submission server whose certificate nobody trusts being used anyway (the
    password sent to whoever answers), without `imap_ca_pem`."""
    sink.users["check"] = "pw-check"
    settings = smtp.SmtpSettings("127.0.0.1", sink.tls_port, "tls", "check", "pw-check")
    with pytest.raises(smtp.SmtpUnreachable):
        await smtp.login_check(settings)
    with pytest.raises(ValueError, match="loopback"):
        smtp.SmtpSettings("smtp.example.com", 25, "none", "u", "p")
