"""The IMAP mail source's reading side (`mail.imap.source.ImapReader`, issue #33) against the real
Dovecot and Cyrus's imapd: metas, Read's text of plain, HTML-only and multipart mail,
attachments listed and downloaded byte-identical (a too-large one refused before any byte of it
is fetched), search, Mark read, Archive, and a stale id that finds nothing."""

from __future__ import annotations

import datetime as dt
import email.message
import email.policy
import os
from collections.abc import AsyncIterator, Sequence

import pytest

from messageweave.mail.errors import MailTooLarge
from messageweave.mail.imap.client import ImapClient
from messageweave.mail.imap.ids import mail_id, mailbox_key, parse_mail_id
from messageweave.mail.imap.responses import Fetched
from messageweave.mail.imap.source import ImapReader
from tests.integration.imap.conftest import ImapPeer
from tests.integration.imap.test_catchup import _admin, _create, _delete

PDF = b"%PDF-1.4\n" + bytes(range(256)) * 40 + b"\n%%EOF\n"


class _CountingClient(ImapClient):
    """The real client, recording every UID FETCH item it sends: the proof that a part was, or
    was not, fetched (a spy on our side, the server is real)."""

    fetched_items: list[str]

    async def uid_fetch(self, uids: object, items: Sequence[str], *,
                        changed_since: int | None = None) -> dict[int, Fetched]:
        self.fetched_items = [*getattr(self, "fetched_items", []), *items]
        return await super().uid_fetch(uids, items, changed_since=changed_since)  # type: ignore[arg-type]


def _client(peer: ImapPeer) -> _CountingClient:
    base = peer.client()
    return _CountingClient(base.host, base.port, username=peer.user, password=peer.password,
                           security=peer.security, ssl_context=peer.ssl_context, timeout=10)


@pytest.fixture
async def reader(imap_peer: ImapPeer) -> AsyncIterator[ImapReader]:
    source = ImapReader(_client(imap_peer), ["INBOX", "Lists"])
    yield source
    await source.aclose()


def _mail(subject: str, text: str | None = "hello there", *, html: str | None = None,
          attachment: bytes | None = None, **fields: str) -> bytes:
    msg = email.message.EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "Bob Sender <bob@example.org>", "me@localhost", subject
    for name, value in fields.items():
        msg[name.replace("_", "-")] = value
    if text is not None:
        msg.set_content(text, cte="quoted-printable")
    if html is not None:
        if text is None:
            msg.set_content(html, subtype="html", cte="base64")
        else:
            msg.add_alternative(html, subtype="html")
    if attachment is not None:
        msg.add_attachment(attachment, maintype="application", subtype="pdf",
                           filename="report.pdf")
    return msg.as_bytes(policy=email.policy.SMTP)


async def _newest_ids(reader: ImapReader, n: int = 10) -> list[str]:
    return [meta.id for meta, _ in await reader.newest(["inbox"], n)]


async def test_metas_of_delivered_mail(imap_peer: ImapPeer, reader: ImapReader) -> None:
    """Catches: a meta without the sender, subject, date, mailbox or preview a notification
    shows, a mailbox without its `inbox` role, or an unknown id that is not left out."""
    imap_peer.deliver(_mail("Quarterly numbers", "The numbers are in the sheet."))
    [email_id] = await _newest_ids(reader)
    [meta] = await reader.metas(["M-not-imap", email_id, email_id[:-1] + "z"])
    assert meta.id == email_id
    assert (meta.sender, meta.subject) == ("Bob Sender <bob@example.org>", "Quarterly numbers")
    now = dt.datetime.now().timestamp()
    assert meta.received_at is not None and abs(meta.received_at - now) < 600
    assert meta.mailbox_ids == {mailbox_key("INBOX")}
    assert meta.preview.startswith("The numbers are in the sheet.")
    assert "$seen" not in meta.keywords
    assert await reader.mailbox_roles(meta.mailbox_ids) == {"inbox"}
    assert await reader.notify_mailbox_ids(["inbox"]) == {mailbox_key("INBOX")}
    [brief] = await reader.metas([email_id], brief=True)
    assert brief.subject == "Quarterly numbers" and brief.preview == ""


async def test_read_shows_plain_html_only_and_multipart_text(imap_peer: ImapPeer,
                                                             reader: ImapReader) -> None:
    """Catches: Read without the text of a quoted-printable plain mail, of a base64 HTML-only
    mail (converted), or of a multipart mail (the plain alternative, not the attachment), or
    without its Reply-To, Message-ID and References."""
    imap_peer.deliver(_mail("plain one", "Grüße aus Köln, line one.\nline two"))
    imap_peer.deliver(_mail("html only", None, html="<html><body><p>Only <b>HTML</b> here"
                            "</p><script>evil()</script></body></html>"))
    imap_peer.deliver(_mail("multi", "the plain alternative", html="<p>the html one</p>",
                            attachment=PDF, Reply_To="Replies <replies@example.org>",
                            Message_ID="<m3@example.org>",
                            References="<r1@example.org> <r2@example.org>"))
    multi, html_only, plain = await _newest_ids(reader)
    read = await reader.read_email(plain, text_cap=10_000)
    assert read is not None and "Grüße aus Köln, line one.\nline two" in read.text
    assert read.attachments == ()
    read = await reader.read_email(html_only, text_cap=10_000)
    assert read is not None and "Only HTML here" in read.text and "evil" not in read.text
    read = await reader.read_email(multi, text_cap=10_000)
    assert read is not None and read.text.strip() == "the plain alternative"
    assert str(read.sender[0]) == "Bob Sender <bob@example.org>"
    assert [str(a) for a in read.reply_to] == ["Replies <replies@example.org>"]
    assert read.subject == "multi" and read.message_ids == ("m3@example.org",)
    assert read.references == ("r1@example.org", "r2@example.org")
    assert [(a.name, a.type) for a in read.attachments] == [("report.pdf", "application/pdf")]
    meta = await reader.mail_with_text(plain, text_max_bytes=10)
    assert meta is not None and meta.text == "Grüße au" and meta.text_truncated


async def test_attachment_is_downloaded_byte_identical(imap_peer: ImapPeer,
                                                       reader: ImapReader) -> None:
    """Catches: an attachment not listed, or downloaded still base64-encoded or cut."""
    imap_peer.deliver(_mail("with a file", "see the file", attachment=PDF))
    [email_id] = await _newest_ids(reader)
    [found] = await reader.attachments(email_id) or []
    assert found.name == "report.pdf" and abs(found.size - len(PDF)) < len(PDF) // 20
    assert await reader.download(found, "report.pdf", max_bytes=10**6) == PDF
    assert await reader.attachments("M-not-imap") is None


async def test_too_large_attachment_is_refused_before_it_is_fetched(
        imap_peer: ImapPeer, reader: ImapReader) -> None:
    """Catches: an attachment past the limit fetched (into memory) before it is refused."""
    big = os.urandom(200_000)
    imap_peer.deliver(_mail("big file", "see the file", attachment=big))
    [email_id] = await _newest_ids(reader)
    [found] = await reader.attachments(email_id) or []
    client = reader._client
    assert isinstance(client, _CountingClient)
    client.fetched_items = []
    with pytest.raises(MailTooLarge):
        await reader.download(found, "big.pdf", max_bytes=100_000)
    assert not [i for i in client.fetched_items if f"[{found.part_id}]" in i]
    assert await reader.download(found, "big.pdf", max_bytes=300_000) == big


async def test_search_finds_a_body_word_and_a_non_ascii_subject_newest_first(
        imap_peer: ImapPeer, reader: ImapReader) -> None:
    """Catches: a search that misses a word of the body or a non-ASCII subject, or that is
    not ordered by INTERNALDATE, newest first."""
    async with imap_peer.client() as c:
        now = dt.datetime.now(dt.UTC)
        await c.append("INBOX", _mail("Réunion kiwi", "nothing else"), internaldate=now)
        await c.append("INBOX", _mail("older kiwi", "the pineapple & <stuff> is here"),
                       internaldate=now - dt.timedelta(days=2))
    found = await reader.search("pineapple")
    [hit] = found.emails
    assert hit.subject == "older kiwi"
    snippet = found.snippet(hit.id)
    assert snippet is not None and "the <mark>pineapple</mark> &amp; &lt;stuff&gt;" in (
        snippet.preview or "")
    assert [m.subject for m in (await reader.search("Réunion")).emails] == ["Réunion kiwi"]
    assert [m.subject for m in (await reader.search("kiwi")).emails] == ["Réunion kiwi",
                                                                       "older kiwi"]
    assert [m.subject for m in await reader.subject_matches("kiwi", 5)] == ["Réunion kiwi",
                                                                           "older kiwi"]
    assert (await reader.search("absent-word")).ids == []


async def test_mark_seen_sets_the_seen_flag(imap_peer: ImapPeer, reader: ImapReader) -> None:
    """Catches: Mark read that leaves the mail unread on the server."""
    imap_peer.deliver(_mail("unread", "text"))
    [email_id] = await _newest_ids(reader)
    assert await reader.mark_seen(email_id) is True
    async with imap_peer.client() as c:
        await c.select("INBOX", readonly=True)
        assert await c.uid_search("SEEN") == [parse_mail_id(email_id).uid]  # type: ignore[union-attr]
    [meta] = await reader.metas([email_id])
    assert "$seen" in meta.keywords


async def test_archive_moves_the_mail_to_archive(imap_peer: ImapPeer, reader: ImapReader) -> None:
    """Catches: Archive that leaves the mail in INBOX, or a second press on the moved mail
    that reports it archived again."""
    imap_peer.deliver(_mail("to archive", "text"))
    [email_id] = await _newest_ids(reader)
    assert await reader.archive(email_id) is True
    assert await reader.metas([email_id]) == []
    async with imap_peer.client() as c:
        assert (await c.status("Archive"))["MESSAGES"] == 1
    assert await reader.archive(email_id) is False


async def test_a_stale_id_finds_nothing(imap_peer: ImapPeer, reader: ImapReader) -> None:
    """Catches: an id of an older UIDVALIDITY (the mailbox made again) that reads, marks or
    moves the new mail that now has its UID."""
    _create(imap_peer, "Lists")
    async with imap_peer.client() as c:
        await c.append("Lists", _mail("old mail", "old text"))
        old = mail_id("Lists", (await c.select("Lists")).uidvalidity, 1)
    assert [m.subject for m in await reader.metas([old])] == ["old mail"]
    _delete(imap_peer, "Lists")
    _create(imap_peer, "Lists")
    async with imap_peer.client() as c:
        await c.append("Lists", _mail("new mail", "new text"))
        assert (await c.select("Lists")).uidvalidity != parse_mail_id(old).uidvalidity  # type: ignore[union-attr]
    assert await reader.metas([old]) == []
    assert await reader.read_email(old, text_cap=100) is None
    assert await reader.mail_with_text(old, text_max_bytes=100) is None
    assert await reader.attachments(old) is None
    assert await reader.mark_seen(old) is False
    assert await reader.archive(old) is False
    with _admin(imap_peer) as m:
        m.select("Lists")
        assert m.uid("SEARCH", "SEEN")[1] == [b""]
