"""Typed readers of parsed responses: FETCH items (ENVELOPE, BODYSTRUCTURE, BODY[section], ...),
LIST, STATUS, SEARCH / ESEARCH, sequence sets and the UIDPLUS response codes.

Every reader takes `parser.Value`s and raises `ImapProtocolError` when they do not have the shape
RFC 9051 gives them. Header text from ENVELOPE (subject, names) is the sender's: it is decoded
(RFC 2047) but not otherwise trusted, and only its first `MAX_HEADER_DECODE` bytes are decoded.
"""

from __future__ import annotations

import datetime as dt
import email.header
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field

from messageweave.mail.imap.errors import ImapProtocolError
from messageweave.mail.imap.parser import Atom, Data, Value
from messageweave.mail.imap.wire import decode_mailbox

MAX_HEADER_DECODE = 8192
MAX_SET_MEMBERS = 1_000_000  # numbers one sequence set may expand to


def as_int(value: Value, what: str) -> int:
    if isinstance(value, Atom) and value.isdigit() and len(value) <= 20:
        return int(value)
    raise ImapProtocolError(f"{what}: a number expected, got {value!r}")


def as_list(value: Value, what: str) -> list[Value]:
    if isinstance(value, list):
        return value
    raise ImapProtocolError(f"{what}: a parenthesized list expected, got {value!r}")


def as_bytes(value: Value) -> bytes | None:
    """A string, NIL (None) or an atom where a string was due (lenient: some servers do)."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, Atom):
        return value.encode()
    raise ImapProtocolError(f"a string expected, got a list {value!r}")


def as_text(value: Value) -> str | None:
    raw = as_bytes(value)
    return None if raw is None else raw.decode("utf-8", "replace")


def header_text(value: Value) -> str | None:
    """A header value from ENVELOPE, RFC 2047 words decoded."""
    raw = as_bytes(value)
    if raw is None:
        return None
    text = raw[:MAX_HEADER_DECODE].decode("utf-8", "replace")
    if "=?" not in text:
        return text
    try:
        return str(email.header.make_header(email.header.decode_header(text)))
    except (ValueError, LookupError, UnicodeError):
        return text


def sequence_set(text: str, *, star: int | None = None) -> list[int]:
    """`2,10:12` -> [2, 10, 11, 12] (ascending ranges either way round)."""
    numbers: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition(":")
        a = _set_number(low, star)
        b = _set_number(high, star) if high else a
        a, b = min(a, b), max(a, b)
        if len(numbers) + (b - a + 1) > MAX_SET_MEMBERS:
            raise ImapProtocolError(f"a sequence set of more than {MAX_SET_MEMBERS} numbers")
        numbers.extend(range(a, b + 1))
    return numbers


def _set_number(text: str, star: int | None) -> int:
    if text == "*" and star is not None:
        return star
    if text.isdigit() and len(text) <= 10:
        return int(text)
    raise ImapProtocolError(f"not a sequence set number: {text!r}")


# ---------------------------------------------------------------------- ENVELOPE


@dataclass(frozen=True)
class ImapAddress:
    name: str | None
    mailbox: str | None
    host: str | None

    @property
    def email(self) -> str:
        return f"{self.mailbox or ''}@{self.host}" if self.host else self.mailbox or ""


@dataclass(frozen=True)
class Envelope:
    date: str | None
    subject: str | None
    from_: tuple[ImapAddress, ...]
    sender: tuple[ImapAddress, ...]
    reply_to: tuple[ImapAddress, ...]
    to: tuple[ImapAddress, ...]
    cc: tuple[ImapAddress, ...]
    bcc: tuple[ImapAddress, ...]
    in_reply_to: str | None
    message_id: str | None


def envelope(value: Value) -> Envelope:
    items = as_list(value, "ENVELOPE")
    if len(items) < 10:
        raise ImapProtocolError(f"ENVELOPE has {len(items)} fields, not 10")
    from_, sender, reply_to, to, cc, bcc = (_addresses(v) for v in items[2:8])
    return Envelope(
        date=as_text(items[0]),
        subject=header_text(items[1]),
        from_=from_,
        sender=sender,
        reply_to=reply_to,
        to=to,
        cc=cc,
        bcc=bcc,
        in_reply_to=as_text(items[8]),
        message_id=as_text(items[9]),
    )


def _addresses(value: Value) -> tuple[ImapAddress, ...]:
    if value is None:
        return ()
    found = []
    for item in as_list(value, "address list"):
        fields = as_list(item, "address")
        if len(fields) != 4:
            raise ImapProtocolError(f"an address has {len(fields)} fields, not 4")
        name, _adl, mailbox, host = fields
        found.append(ImapAddress(header_text(name), as_text(mailbox), as_text(host)))
    return tuple(found)


# ---------------------------------------------------------------------- BODYSTRUCTURE


@dataclass(frozen=True)
class BodyPart:
    """One node of BODYSTRUCTURE. `section` is what BODY[...] takes ("1", "2.1"; "" for a
    multipart at the top). `size` is the encoded size in octets (0 for a multipart)."""

    section: str
    type: str
    subtype: str
    params: dict[str, str] = field(default_factory=dict)
    encoding: str | None = None
    size: int = 0
    content_id: str | None = None
    disposition: str | None = None
    disposition_params: dict[str, str] = field(default_factory=dict)
    parts: tuple[BodyPart, ...] = ()

    @property
    def filename(self) -> str | None:
        """The attachment's name: disposition `filename`, else the type's `name`."""
        return _filename(self.disposition_params) or _filename(self.params)

    def walk(self) -> list[BodyPart]:
        """This part and every part inside it, depth first."""
        found = [self]
        for part in self.parts:
            found.extend(part.walk())
        return found


def bodystructure(value: Value, section: str = "") -> BodyPart:
    items = as_list(value, "BODYSTRUCTURE")
    if items and isinstance(items[0], list):
        return _multipart(items, section)
    return _single(items, section or "1")


def _multipart(items: list[Value], section: str) -> BodyPart:
    children = []
    n = 0
    while n < len(items) and isinstance(items[n], list):
        number = str(n + 1)
        children.append(bodystructure(items[n], f"{section}.{number}" if section else number))
        n += 1
    if n == len(items):
        raise ImapProtocolError("a multipart BODYSTRUCTURE without its subtype")
    ext = items[n + 1 :]
    disposition, disposition_params = _disposition(ext[1] if len(ext) > 1 else None)
    return BodyPart(
        section,
        "multipart",
        (as_text(items[n]) or "").lower(),
        params=_params(ext[0] if ext else None),
        disposition=disposition,
        disposition_params=disposition_params,
        parts=tuple(children),
    )


def _single(items: list[Value], section: str) -> BodyPart:
    if len(items) < 7:
        raise ImapProtocolError(f"a body part has {len(items)} fields, at least 7 expected")
    mime_type = (as_text(items[0]) or "").lower()
    subtype = (as_text(items[1]) or "").lower()
    rest = items[7:]
    inner: tuple[BodyPart, ...] = ()
    if mime_type == "message" and subtype in ("rfc822", "global") and len(rest) >= 3:
        body = as_list(rest[1], "message/rfc822 body")
        multipart = bool(body) and isinstance(body[0], list)  # its parts are section.1, .2
        inner = (bodystructure(body, section if multipart else section + ".1"),)
        rest = rest[3:]
    elif mime_type == "text":
        rest = rest[1:]
    # extension data: md5, disposition, language, location
    disposition, disposition_params = _disposition(rest[1] if len(rest) > 1 else None)
    return BodyPart(
        section,
        mime_type,
        subtype,
        params=_params(items[2]),
        content_id=as_text(items[3]),
        encoding=(as_text(items[5]) or "").lower() or None,
        size=as_int(items[6], "body size"),
        disposition=disposition,
        disposition_params=disposition_params,
        parts=inner,
    )


def _params(value: Value) -> dict[str, str]:
    if value is None or isinstance(value, (bytes, Atom)):
        return {}
    return {
        (as_text(value[i]) or "").lower(): header_text(value[i + 1]) or ""
        for i in range(0, len(value) - 1, 2)
    }


def _disposition(value: Value) -> tuple[str | None, dict[str, str]]:
    if not isinstance(value, list) or not value:
        return None, {}
    kind = as_text(value[0])
    return (kind.lower() if kind else None), _params(value[1] if len(value) > 1 else None)


def _filename(params: dict[str, str]) -> str | None:
    for key in ("filename", "name"):
        if params.get(key):
            return params[key]
        encoded = params.get(key + "*")
        if encoded:
            return rfc2231(encoded) or None
    return None


def rfc2231(value: str) -> str:
    """`utf-8''r%C3%A9sum%C3%A9.pdf` -> `résumé.pdf` (RFC 2231 §4); kept as sent when it is
    not of that form."""
    charset, quote, rest = value.partition("'")
    _language, quote2, encoded = rest.partition("'")
    if not (quote and quote2):
        return value
    try:
        return urllib.parse.unquote(encoded, encoding=charset or "ascii", errors="replace")
    except LookupError:  # an unknown charset
        return urllib.parse.unquote(encoded, encoding="utf-8", errors="replace")


# ---------------------------------------------------------------------- FETCH


@dataclass
class Fetched:
    """One `* n FETCH (...)`. `sections` maps the item name as the server sent it, origin
    included (`BODY[1]`, `BODY[HEADER]`, `BODY[2]<0>`), to its bytes (None for NIL)."""

    seq: int
    uid: int | None = None
    flags: tuple[str, ...] | None = None
    internaldate: dt.datetime | None = None
    size: int | None = None
    modseq: int | None = None
    envelope: Envelope | None = None
    bodystructure: BodyPart | None = None
    sections: dict[str, bytes | None] = field(default_factory=dict)


def fetched(data: Data) -> Fetched:
    if data.number is None or len(data.values) != 1:
        raise ImapProtocolError("FETCH without a message number or item list")
    items = as_list(data.values[0], "FETCH")
    if len(items) % 2:
        raise ImapProtocolError("FETCH items are not name/value pairs")
    out = Fetched(data.number)
    for i in range(0, len(items), 2):
        name, value = items[i], items[i + 1]
        if not isinstance(name, Atom):
            raise ImapProtocolError(f"a FETCH item name expected, got {name!r}")
        _fetch_item(out, name.upper(), value)
    return out


def _fetch_item(out: Fetched, name: str, value: Value) -> None:
    if name == "UID":
        out.uid = as_int(value, "UID")
    elif name == "FLAGS":
        out.flags = tuple(str(f) for f in as_list(value, "FLAGS"))
    elif name == "INTERNALDATE":
        out.internaldate = internaldate(as_text(value) or "")
    elif name == "RFC822.SIZE":
        out.size = as_int(value, "RFC822.SIZE")
    elif name == "MODSEQ":
        out.modseq = as_int(as_list(value, "MODSEQ")[0] if value else None, "MODSEQ")
    elif name == "ENVELOPE":
        out.envelope = envelope(value)
    elif name in ("BODYSTRUCTURE", "BODY"):
        out.bodystructure = bodystructure(value)
    elif name.startswith(("BODY[", "BINARY[", "RFC822")):
        out.sections[name] = as_bytes(value)


def internaldate(text: str) -> dt.datetime:
    """`17-Jul-1996 02:44:25 -0700` (the day may have a leading space)."""
    try:
        return dt.datetime.strptime(text.strip(), "%d-%b-%Y %H:%M:%S %z")
    except ValueError:
        raise ImapProtocolError(f"not an INTERNALDATE: {text[:40]!r}") from None


# ---------------------------------------------------------------------- LIST, STATUS, SEARCH


@dataclass(frozen=True)
class MailboxInfo:
    """One LIST entry. `attributes` as sent (`\\HasNoChildren`, `\\Archive`, ...)."""

    name: str
    delimiter: str | None
    attributes: frozenset[str]

    @property
    def selectable(self) -> bool:
        return not {"\\noselect", "\\nonexistent"} & {a.lower() for a in self.attributes}

    def has(self, attribute: str) -> bool:
        return attribute.lower() in {a.lower() for a in self.attributes}


def list_entry(data: Data, *, utf8: bool = False) -> MailboxInfo:
    if len(data.values) < 3:
        raise ImapProtocolError("LIST without attributes, delimiter and name")
    attributes, delimiter, name = data.values[:3]
    raw = as_bytes(name) or b""
    return MailboxInfo(
        raw.decode("utf-8", "replace") if utf8 else decode_mailbox(raw),
        as_text(delimiter),
        frozenset(str(a) for a in as_list(attributes, "LIST attributes")),
    )


def status_items(data: Data) -> dict[str, int]:
    if len(data.values) < 2:
        raise ImapProtocolError("STATUS without mailbox and items")
    items = as_list(data.values[1], "STATUS")
    return {
        str(items[i]).upper(): as_int(items[i + 1], "STATUS item")
        for i in range(0, len(items) - 1, 2)
    }


def search_numbers(data: Data) -> list[int]:
    """`* SEARCH 2 84 882` (a trailing `(MODSEQ n)` of CONDSTORE left out)."""
    return [as_int(v, "SEARCH") for v in data.values if not isinstance(v, list)]


def esearch_numbers(data: Data) -> list[int]:
    """The ALL of `* ESEARCH (TAG "a1") UID ALL 2,10:11` (RFC 4731); no ALL: none matched."""
    values = data.values
    i = 1 if values and isinstance(values[0], list) else 0
    if i < len(values) and str(values[i]).upper() == "UID":
        i += 1
    while i + 1 < len(values):
        if str(values[i]).upper() == "ALL":
            return sequence_set(str(values[i + 1]))
        i += 2
    return []


def copy_uids(args: Sequence[Value]) -> tuple[int, list[int], list[int]]:
    """`[COPYUID uidvalidity source-set dest-set]` (RFC 4315): (uidvalidity, sources, dests),
    the two lists in matching order."""
    if len(args) != 3:
        raise ImapProtocolError(f"COPYUID with {len(args)} arguments")
    validity = as_int(args[0], "COPYUID")
    sources, dests = sequence_set(str(args[1])), sequence_set(str(args[2]))
    if len(sources) != len(dests):
        raise ImapProtocolError("COPYUID sets of different lengths")
    return validity, sources, dests
