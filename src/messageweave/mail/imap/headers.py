"""A mail's header fields as the records hold them: the fields Read and a reply need
(`READ_FIELDS`, fetched with `BODY.PEEK[HEADER.FIELDS (...)]` and read with the standard
library's parser), ENVELOPE's sender, IMAP flags as JMAP keywords, INTERNALDATE as JMAP's
`receivedAt`.

Everything here is the sender's text: names and the subject are decoded (RFC 2047) and cleaned
(`untrusted.clean`) the way `mail.jmap.reading.mail_text` cleans JMAP's, Message-IDs kept only
when `<id>`-shaped, and no parse error escapes (a broken field reads as absent).
"""

from __future__ import annotations

import datetime as dt
import email.parser
import email.policy
import email.utils
from email.message import Message

from messageweave.mail.imap.responses import Envelope, header_text
from messageweave.mail.records import Address
from messageweave.untrusted import INPUT_CAP, SUBJECT_MAX_CHARS, clean, message_ids

READ_FIELDS = ("FROM", "TO", "CC", "REPLY-TO", "SUBJECT", "DATE", "MESSAGE-ID", "REFERENCES")
MAX_HEADER_BYTES = 64 * 1024  # of the fields fetched: more is no header anybody means
_KEYWORDS = {"\\seen": "$seen", "\\flagged": "$flagged", "\\answered": "$answered",
             "\\draft": "$draft"}
_NO_KEYWORDS: frozenset[str] = frozenset()


def fields_item() -> str:
    """The FETCH item of the header fields Read needs, at most `MAX_HEADER_BYTES`."""
    return f"BODY.PEEK[HEADER.FIELDS ({' '.join(READ_FIELDS)})]<0.{MAX_HEADER_BYTES}>"


def parse(raw: bytes) -> Message:
    return email.parser.BytesHeaderParser(policy=email.policy.compat32).parsebytes(raw)


def decoded(value: str | None) -> str | None:
    """A header value with its RFC 2047 words decoded (`responses.header_text`: the first
    `MAX_HEADER_DECODE` bytes, kept as sent when broken); raw 8-bit bytes read as UTF-8."""
    if value is None:
        return None
    return header_text(str(value).encode("utf-8", "surrogateescape"))


def addresses(msg: Message, field: str) -> tuple[Address, ...]:
    values = [str(v)[:INPUT_CAP] for v in msg.get_all(field) or []]
    if not values:
        return ()
    try:
        pairs = email.utils.getaddresses(values)
    except (ValueError, IndexError, TypeError):
        return ()
    return tuple(Address(clean(decoded(name)) or None, addr or None)
                 for name, addr in pairs if name or addr)


def subject(msg: Message) -> str | None:
    return clean(decoded(msg.get("subject")), SUBJECT_MAX_CHARS) or None


def sent_at(msg: Message) -> str | None:
    """The Date field as RFC 3339 (a date without a zone taken for UTC); None when broken."""
    value = msg.get("date")
    if not value:
        return None
    try:
        when = email.utils.parsedate_to_datetime(str(value)[:200])
    except (ValueError, TypeError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.isoformat()


def ids(msg: Message, field: str) -> tuple[str, ...]:
    """The `<id>`-shaped Message-IDs of `field`, without angle brackets."""
    text = " ".join(str(v)[:INPUT_CAP] for v in msg.get_all(field) or [])
    return message_ids(text.replace("<", " <").split())


def utc_date(when: dt.datetime | None) -> str | None:
    """INTERNALDATE as JMAP's `receivedAt` (`2026-12-05T07:00:00Z`)."""
    return None if when is None else when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def unix(when: dt.datetime | None) -> int | None:
    return None if when is None else int(when.timestamp())


def sender(envelope: Envelope | None) -> str | None:
    """"Name <addr>" (or the bare address) of the first From address, as JMAP's meta has it."""
    for addr in envelope.from_ if envelope else ():
        name = addr.name.strip() if addr.name else None
        mail = addr.email or None
        if name and mail:
            return f"{name} <{mail}>"
        if mail or name:
            return mail or name
    return None


def keywords(flags: tuple[str, ...] | None) -> frozenset[str]:
    """IMAP flags as JMAP keywords (`\\Seen` is `$seen`; `\\Recent` and `\\Deleted` left out,
    other keywords lower case)."""
    if not flags:
        return _NO_KEYWORDS
    found = set()
    for flag in flags:
        low = flag.lower()
        if low in _KEYWORDS:
            found.add(_KEYWORDS[low])
        elif not low.startswith("\\"):
            found.add(low)
    return frozenset(found)
