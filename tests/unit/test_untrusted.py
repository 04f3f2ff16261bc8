"""A mail's names and subjects cleaned in one place (issue #32, findings 1 and 3:
`messageweave.untrusted`), and every renderer that prints them using it: Read's header lines and
attachments, search hits, notifications, digests, the reply's subject."""

from __future__ import annotations

import time

from messageweave.config.model import parse_wire
from messageweave.mail.jmap import Attachment, EmailMeta, MailText, SearchResult, SearchSnippet
from messageweave.mail.jmap.reading import mail_text
from messageweave.pipeline import digest, reading, reply, search
from messageweave.pipeline.notify import render_notification
from messageweave.untrusted import (
    INPUT_CAP,
    NAME_MAX_CHARS,
    clean,
    message_ids,
    plain_address,
)
from tests.helpers import sample_wire

HOSTILE = "Bob\r\nBcc: victim@evil.example\u202e\u200b\x00\u2028X"
SHOWN = "Bob Bcc: victim@evil.example X"
CFG = parse_wire(sample_wire(bot_language="en"))


def meta(sender: str | None, subject: str | None) -> EmailMeta:
    return EmailMeta(id="M1", sender=sender, subject=subject, received_at=1_700_000_000,
                     mailbox_ids=frozenset(), keywords=frozenset(), preview="")


def test_clean_puts_a_hostile_name_on_one_short_line() -> None:
    """Catches CR/LF, a bidi override, a zero-width space, NUL or a line separator surviving
    the cleaning, a run of spaces kept, or a name longer than its cap."""
    assert clean(HOSTILE) == SHOWN
    assert clean("  a \t\n  b  ") == "a b"
    assert clean(None) == clean("") == clean("\u200b\r\n") == ""
    long = clean("x" * 10_000)
    assert len(long) == NAME_MAX_CHARS and long.endswith("…")
    assert clean("回复：你好 🙂") == "回复：你好 🙂"


def test_clean_is_linear_on_a_megabyte() -> None:
    """Catches a super-linear cleaning (a mail's 1 MB header value must not stall the event
    loop): each shape of hostile megabyte is cleaned in well under a second of CPU time (the
    thread's own, which a busy machine does not inflate)."""
    for hostile in (" " * 1_000_000, "\r\n" * 500_000, "\u200b" * 1_000_000,
                    "a " * 500_000, "Re:" * 333_334):
        started = time.thread_time()
        assert len(clean(hostile, 1_000_000)) <= INPUT_CAP or hostile.isprintable()
        assert time.thread_time() - started < 0.5


def test_reply_subject_is_linear_on_a_run_of_spaces() -> None:
    """Catches the old prefix pattern (`\\s*(\\[\\d+\\])?\\s*`: quadratic, 0.37 s on 8k spaces)
    or any other super-linear pass over a subject: 100k spaces after `Re` are one space."""
    started = time.thread_time()
    assert reply.reply_subject("Re" + " " * 100_000 + "x") == "Re: Re x"
    assert reply.reply_subject("Re:" + " " * 100_000 + ":x") == "Re: :x"
    assert time.thread_time() - started < 0.5
    assert reply.reply_subject("RE: re :Aw[2]: 回复：hi") == "Re: hi"
    assert reply.reply_subject(f"Invoice 3\r\nBcc: {HOSTILE}") == f"Re: Invoice 3 Bcc: {SHOWN}"


def test_only_bare_addresses_and_bracket_shaped_ids_pass() -> None:
    """Catches an address with a space, a quote, a second `@`, brackets or a control
    character taken for a plain one; a Message-ID with a space or a control kept."""
    assert plain_address("bob@example.org") == "bob@example.org"
    for bad in ("", "bob", "a b@x.org", '"a b"@x.org', "a@b@c", "<a@b>", "a@b\r\n",
                "a\u200b@b.org", "a@b.", "a,b@c", None):
        assert plain_address(bad) is None, bad
    assert message_ids(["<a@b>", "a b@c", "x@y", "a@b", "", "c@d\r\nBcc: v@e"]) == ("a@b",
                                                                                    "x@y")
    assert len(message_ids(f"<{n}@x>" for n in range(500))) == 30


def test_a_parsed_mail_holds_cleaned_names_subject_and_ids() -> None:
    """Catches the JMAP parse (`mail_text`) handing on a raw name, subject, attachment name
    or Message-ID to Read and to the reply."""
    mail = mail_text({"id": "M1", "from": [{"name": HOSTILE, "email": "bob@example.org"}],
                      "replyTo": [{"name": HOSTILE, "email": "x@evil.example"}],
                      "subject": HOSTILE, "messageId": ["a@b", "c d\r\n"],
                      "attachments": [{"partId": "2", "blobId": "b", "name": HOSTILE,
                                       "size": 1}]})
    assert mail.sender[0].name == mail.reply_to[0].name == mail.subject == SHOWN
    assert mail.message_ids == ("a@b",)
    assert mail.attachments[0].name == SHOWN


def test_read_shows_reply_to_and_cleans_every_header_line_and_button() -> None:
    """Catches Read leaving out the Reply-To (where a reply goes), or printing a raw name,
    subject or attachment name (in the list or on its button)."""
    hostile = reading.Address(HOSTILE, "bob@example.org\r\nX")
    mail = MailText("M1", (hostile,), (hostile,), (), (hostile,), HOSTILE, None, None, (), (),
                    attachments=(Attachment("2", "b", HOSTILE, "text/plain", 10),))
    read = reading.render(mail, CFG)
    [page], [(index, label)] = read.texts, read.attachments
    assert index == 0
    assert page.startswith(f"From: {SHOWN} <bob@example.org X>\n"
                           f"Reply-To: {SHOWN} <bob@example.org X>\n")
    assert f"Subject: {SHOWN}\n" in page and f"- {SHOWN} (10 B)" in page
    assert not any(c in page + label for c in "\r\u202e\u200b\x00")


def test_notifications_digests_and_search_hits_are_cleaned() -> None:
    """Catches a notification, a digest line, a search hit or its preview printing a name or
    subject with a line break, a bidi override or a zero-width character."""
    note = render_notification(meta(HOSTILE, HOSTILE), "Etc/UTC")
    assert note.splitlines()[:2] == [f"From: {SHOWN}", f"Subject: {SHOWN}"]
    line = digest.digest_text("en", 1, [meta(HOSTILE, HOSTILE)]).splitlines()[1]
    assert "\u202e" not in line and "\u200b" not in line and SHOWN[:20] in line
    hits = search.search_reply("x", SearchResult(["M1", "M2"], [meta(None, HOSTILE)], [
        SearchSnippet("M1", None, HOSTILE), SearchSnippet("M2", HOSTILE, None)]))
    assert hits.splitlines()[1:] == [f"- {SHOWN}（M1）", f"  {SHOWN}", f"- {SHOWN}（M2）"]
