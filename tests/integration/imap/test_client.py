"""`ImapClient` against real Dovecot (TLS, STARTTLS) and Cyrus (STARTTLS) servers."""

from __future__ import annotations

import asyncio
import base64
import ssl
import time
from email.message import EmailMessage
from email.policy import SMTP

import pytest

from messageweave.mail.imap import (
    ImapArgumentError,
    ImapAuthError,
    ImapClient,
    ImapTlsError,
    ImapTransportError,
    Text,
)
from tests.integration.imap.conftest import ImapPeer
from tests.peers.cyrus import make_message
from tests.peers.dovecot import DovecotServer

PDF = b"%PDF-1.4\n" + bytes(range(256)) * 40 + b"\n%%EOF\n"
SUBJECT = "Grüße aus Köln – Rechnung Nr. 7"


def _multipart_with_attachment() -> bytes:
    msg = EmailMessage(policy=SMTP)
    msg["From"] = "Jörg Bauer <joerg@example.org>"
    msg["To"] = "alice@localhost"
    msg["Subject"] = SUBJECT
    msg["Message-ID"] = "<rechnung-7@example.org>"
    msg.set_content("Hallo,\nanbei die Rechnung.\n")
    msg.add_attachment(PDF, maintype="application", subtype="pdf", filename="résumé.pdf")
    return msg.as_bytes()


async def test_a_refused_login_is_the_auth_error_and_never_shows_the_password(
    imap_peer: ImapPeer,
) -> None:
    """Catches a wrong password surfacing as a generic or protocol error (the page must say
    "refused login"), and the password leaking into the error's text."""
    wrong = "not-the-password-4711"
    with pytest.raises(ImapAuthError) as caught:
        await imap_peer.client(password=wrong).connect()
    assert wrong not in str(caught.value) and imap_peer.password not in str(caught.value)
    assert imap_peer.user in str(caught.value)


async def test_append_then_select_and_fetch_envelope_structure_and_the_attachment(
    imap: ImapClient, imap_peer: ImapPeer
) -> None:
    """Catches an APPEND whose literal or APPENDUID is mishandled, a SELECT without
    UIDVALIDITY/UIDNEXT, and a FETCH whose ENVELOPE (encoded subject, names), BODYSTRUCTURE
    (the attachment's part number and file name) or BODY[2] literal is read wrong."""
    appended = await imap.append("INBOX", _multipart_with_attachment(), flags=["\\Flagged"])
    state = await imap.select("INBOX")
    assert appended is not None and appended.uidvalidity == state.uidvalidity
    [uid] = appended.uids
    assert state.exists == 1 and state.uidnext == uid + 1
    if "CONDSTORE" in imap.capabilities:
        assert state.highestmodseq
    got = await imap.uid_fetch([uid], ["UID", "FLAGS", "ENVELOPE", "BODYSTRUCTURE",
                                       "RFC822.SIZE", "INTERNALDATE", "BODY.PEEK[2]"])  # fmt: skip
    mail = got[uid]
    assert mail.envelope is not None and mail.envelope.subject == SUBJECT
    assert mail.envelope.from_[0].name == "Jörg Bauer"
    assert mail.envelope.from_[0].email == "joerg@example.org"
    assert mail.envelope.message_id == "<rechnung-7@example.org>"
    assert mail.flags is not None and "\\Flagged" in mail.flags and "\\Seen" not in mail.flags
    assert mail.bodystructure is not None
    parts = {p.section: p for p in mail.bodystructure.walk()}
    assert parts["1"].type == "text" and parts["2"].filename == "résumé.pdf"
    assert base64.b64decode(mail.sections["BODY[2]"] or b"") == PDF
    assert mail.size and mail.internaldate is not None


async def test_search_finds_a_non_ascii_subject_and_store_sets_seen(
    imap: ImapClient, imap_peer: ImapPeer
) -> None:
    """Catches search text sent without CHARSET UTF-8 / as a broken literal (no hit, or BAD),
    and a STORE \\Seen that does not reach the server."""
    await imap.append("INBOX", make_message(subject="Weekly report"))
    other = await imap.append("INBOX", _multipart_with_attachment())
    await imap.select("INBOX")
    assert other is not None
    assert await imap.uid_search("SUBJECT", Text("Grüße aus Köln")) == list(other.uids)
    assert await imap.uid_search("UNSEEN") == sorted([*other.uids, other.uids[0] - 1])
    await imap.uid_store(other.uids, ["\\Seen"])
    flags = await imap.uid_fetch(other.uids, ["FLAGS"])
    assert "\\Seen" in (flags[other.uids[0]].flags or ())
    assert await imap.uid_search("UNSEEN") == [other.uids[0] - 1]


async def test_move_to_the_special_use_archive(imap: ImapClient, imap_peer: ImapPeer) -> None:
    """Catches a LIST whose special-use attributes are lost (no \\Archive found) and a move
    that leaves the mail in INBOX or does not land in Archive."""
    archive = await imap.special_use("\\Archive")
    assert archive == "Archive"
    appended = await imap.append("INBOX", make_message(subject="to archive"))
    assert appended is not None
    await imap.select("INBOX")
    await imap.uid_move(appended.uids, archive)
    assert await imap.uid_search("ALL") == []
    await imap.select(archive, readonly=True)
    assert len(await imap.uid_search("SUBJECT", Text("to archive"))) == 1


async def test_uid_expunge_removes_only_the_given_mail_marked_deleted(
    imap: ImapClient, imap_peer: ImapPeer
) -> None:
    """Catches: no public UID EXPUNGE (a caller reaching into the client's private `_run`), or
    one that expunges every mail marked \\Deleted (the owner's own, not only ours) or leaves
    the given one."""
    ours = await imap.append("INBOX", make_message(subject="ours"), flags=["\\Deleted"])
    theirs = await imap.append("INBOX", make_message(subject="theirs"), flags=["\\Deleted"])
    assert ours is not None and theirs is not None
    await imap.select("INBOX")
    await imap.uid_expunge(ours.uids)
    assert await imap.uid_search("ALL") == list(theirs.uids)
    left = await imap.uid_fetch(theirs.uids, ["FLAGS"])
    assert "\\Deleted" in (left[theirs.uids[0]].flags or ())


async def test_without_move_the_client_copies_marks_deleted_and_expunges_only_that_mail(
    dovecot_without_move: DovecotServer,
) -> None:
    """Catches a client that sends MOVE to a server that does not offer it, or that falls back
    to a plain EXPUNGE (which would also remove other mail marked \\Deleted); and an APPEND
    whose literal is sent before the server's `+` where LITERAL+ is missing."""
    srv = dovecot_without_move
    keep = srv.append("nomove", "INBOX", flags=["\\Deleted"], subject="deleted by the user")
    client = ImapClient("127.0.0.1", srv.ports.imaps, username="nomove", password="pw-nomove",
                        ssl_context=srv.ssl_context(), timeout=10)  # fmt: skip
    mark = srv.log_mark()
    async with client:
        assert not {"MOVE", "LITERAL+"} & client.capabilities
        appended = await client.append("INBOX", make_message(subject="to archive"))
        assert appended is not None
        [move] = appended.uids
        await client.select("INBOX")
        copied = await client.uid_move([move], "Archive")
    assert copied is not None and copied.sources == (move,)
    assert srv.uids("nomove", "INBOX") == [keep]
    assert srv.uids("nomove", "Archive") == list(copied.uids)
    # The harness's own APPEND sessions log their logout too (late, maybe past `mark`): the
    # line of the session that expunged is ours. STORE \Deleted + UID EXPUNGE ran, not MOVE.
    logout = srv.wait_for_log("imap(nomove)", "Logged out", "expunged=1", after=mark)
    assert "deleted=1 expunged=1" in logout


async def test_idle_wakes_on_an_lmtp_delivery_within_two_seconds(
    imap: ImapClient, imap_peer: ImapPeer
) -> None:
    """Catches an IDLE that never returns on new mail (no EXISTS read while idling), or only
    after its timeout, and a DONE that leaves the connection unusable."""
    await imap.select("INBOX")
    idling = asyncio.create_task(imap.idle(30))
    await asyncio.to_thread(imap_peer.deliver, make_message(subject="wake up"))
    delivered = time.monotonic()
    events = await asyncio.wait_for(idling, 10)
    assert time.monotonic() - delivered < 2.0
    assert any(e.kind == "EXISTS" for e in events)
    assert len(await imap.uid_search("ALL")) == 1


async def test_a_server_that_goes_away_mid_command_is_the_transport_error(
    dovecot: DovecotServer,
) -> None:
    """Catches a client that hangs, or raises something other than the transport error, when
    the server ends the connection while a command (IDLE) is in progress."""
    dovecot.add_user("goes-away", "pw-away")
    client = ImapClient(
        "127.0.0.1", dovecot.ports.imaps, username="goes-away", password="pw-away",
        ssl_context=dovecot.ssl_context(), timeout=10,
    )  # fmt: skip
    async with client:
        await client.select("INBOX")
        idling = asyncio.create_task(client.idle(60))
        with dovecot.stopped():
            with pytest.raises(ImapTransportError):
                await asyncio.wait_for(idling, 15)
        assert not client.connected


async def test_cr_lf_in_a_mailbox_name_is_refused_and_in_search_text_sent_as_a_literal(
    imap: ImapClient, imap_peer: ImapPeer
) -> None:
    """Catches command injection: a mailbox name or search words from a user carrying CRLF
    and a second command (here one deleting a mailbox) must never reach the server as one."""
    injected = "INBOX\r\nmw99 DELETE Archive"
    with pytest.raises(ImapArgumentError):
        await imap.select(injected)
    await imap.select("INBOX")
    assert await imap.uid_search("SUBJECT", Text("x\r\nmw98 DELETE Archive")) == []
    assert "Archive" in {m.name for m in await imap.list_mailboxes()}


async def test_an_untrusted_certificate_is_the_tls_error(dovecot: DovecotServer) -> None:
    """Catches a client that does not verify the server (a test CA not passed in must fail)."""
    client = ImapClient("127.0.0.1", dovecot.ports.imaps, username="alice", password="secret",
                        ssl_context=ssl.create_default_context(), timeout=10)  # fmt: skip
    with pytest.raises(ImapTlsError, match="certificate"):
        await client.connect()


async def test_a_silent_server_times_out_as_the_transport_error() -> None:
    """Catches a connect or command without a timeout: a server that accepts and never
    greets would hold the caller forever."""
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        client = ImapClient("127.0.0.1", port, username="u", password="p", security="none",
                            timeout=0.5)  # fmt: skip
        with pytest.raises(ImapTransportError, match=r"no answer within 0\.5 s"):
            await client.connect()


def test_plain_text_imap_is_refused_for_a_host_that_is_not_loopback() -> None:
    """Catches `security="none"` sending the password in clear text over a network (the
    contract allows it only for a loopback host)."""
    with pytest.raises(ValueError, match="loopback"):
        ImapClient("imap.example.org", 143, username="u", password="p", security="none")
    ImapClient("127.0.0.1", 143, username="u", password="p", security="none")
