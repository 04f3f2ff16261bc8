"""The parts of an IMAP mail out of its BODYSTRUCTURE, and their bytes made text.

- `text_parts`: what a plain-text reader shows, as JMAP's `textBody` (RFC 8621 §4.1.4) has it:
  in a multipart/alternative the text/plain choice, else the HTML one; in every other multipart
  each inline text/plain or text/html part without a file name, in order.
- `attachment_parts`: every other leaf (a message/rfc822 is one attachment, not opened).
- `fetch_bytes`: how many encoded bytes of a part to fetch (`BODY.PEEK[section]<0.N>`) for a
  text of `text_bytes` (HTML needs more, as `jmap.body.fetch_args` says; base64 and
  quoted-printable take more room than what they carry).
- `decode`: the transfer encoding (base64, quoted-printable) undone, a cut one too, then the
  charset (an unknown one read as UTF-8; every error replaced, never raised).
- `text_of`: the parts' texts joined, HTML converted within one converter budget for the mail,
  cut to a cap of UTF-8 bytes: `jmap.body.text_body` itself.
"""

from __future__ import annotations

import binascii
import codecs
from collections.abc import Sequence
from dataclasses import dataclass

from messageweave.mail import html_text
from messageweave.mail.imap.responses import BodyPart
from messageweave.mail.jmap import body
from messageweave.mail.jmap.body import HTML_BYTES_PER_TEXT_BYTE

MAX_TEXT_PARTS = 8  # a hostile mail of a thousand text parts is read for its first few
MAX_ATTACHMENTS = 100
_BASE64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="
_NOT_BASE64 = bytes(b for b in range(256) if b not in _BASE64)


@dataclass(frozen=True)
class FetchedPart:
    """A text part and its encoded bytes as fetched; `cut` when they are not the whole part."""

    part: BodyPart
    raw: bytes
    cut: bool


def is_html(part: BodyPart) -> bool:
    return part.type == "text" and part.subtype == "html"


def _is_body_text(part: BodyPart) -> bool:
    return (part.type == "text" and part.subtype in ("plain", "html")
            and part.disposition != "attachment" and not part.filename)


def text_parts(root: BodyPart) -> list[BodyPart]:
    """The parts of `root` a plain-text reader shows, in order (at most `MAX_TEXT_PARTS`)."""
    found: list[BodyPart] = []
    _collect(root, found)
    return found[:MAX_TEXT_PARTS]


def _collect(part: BodyPart, found: list[BodyPart]) -> None:
    if part.type != "multipart":
        if _is_body_text(part):
            found.append(part)
        return
    if part.subtype != "alternative":
        for child in part.parts:
            _collect(child, found)
        return
    options: list[list[BodyPart]] = []
    for child in part.parts:
        chosen: list[BodyPart] = []
        _collect(child, chosen)
        if chosen:
            options.append(chosen)
    plain = [o for o in options if not any(is_html(p) for p in o)]
    found.extend(plain[0] if plain else options[0] if options else [])


def attachment_parts(root: BodyPart) -> list[BodyPart]:
    """The leaves of `root` that are not its text (at most `MAX_ATTACHMENTS`)."""
    found: list[BodyPart] = []
    stack = [root]
    while stack and len(found) < MAX_ATTACHMENTS:
        part = stack.pop()
        if part.type == "multipart":
            stack.extend(reversed(part.parts))
        elif not _is_body_text(part):
            found.append(part)
    return found


def find_part(root: BodyPart, section: str) -> BodyPart | None:
    return next((p for p in root.walk() if p.section == section and p.type != "multipart"), None)


def media_type(part: BodyPart) -> str:
    if not part.type or not part.subtype:
        return "application/octet-stream"
    return f"{part.type}/{part.subtype}"


def decoded_size(part: BodyPart) -> int:
    """The part's size once its transfer encoding is undone, estimated from the encoded size
    (base64 in lines of 76 characters: 57 bytes per 78)."""
    if part.encoding == "base64":
        return part.size * 57 // 78
    return part.size


def encoded_bound(decoded: int, encoding: str | None) -> int:
    """At least as many encoded bytes as carry `decoded` bytes."""
    if encoding == "base64":
        return decoded * 4 // 3 + decoded // 20 + 8
    if encoding == "quoted-printable":
        return decoded * 3 + 8
    return decoded


def fetch_bytes(part: BodyPart, text_bytes: int) -> int:
    """The encoded bytes of `part` to fetch for a text of `text_bytes` (HTML: more)."""
    wanted = text_bytes
    if is_html(part):
        wanted = max(text_bytes, min(text_bytes * HTML_BYTES_PER_TEXT_BYTE,
                                     html_text.MAX_INPUT_BYTES))
    return max(1, encoded_bound(wanted, part.encoding))


def undo_transfer(raw: bytes, encoding: str | None, *, cut: bool = False) -> bytes:
    """`raw` without its transfer encoding; `cut`: `raw` is a prefix (a partial fetch), so a
    last incomplete group or escape is dropped."""
    if encoding == "base64":
        data = raw.translate(None, _NOT_BASE64)
        data = data[:len(data) // 4 * 4]
        try:
            return binascii.a2b_base64(data)
        except binascii.Error:  # padding in the middle: decode what comes before it
            head = data.split(b"=", 1)[0]
            return binascii.a2b_base64(head[:len(head) // 4 * 4])
    if encoding == "quoted-printable":
        if cut:
            tail = raw[-2:].find(b"=")
            raw = raw[:len(raw) - 2 + tail] if tail >= 0 else raw
        return binascii.a2b_qp(raw)
    return raw


def charset_text(data: bytes, charset: str | None) -> str:
    """`data` read in `charset` (US-ASCII and unknown charsets as UTF-8), errors replaced."""
    name = (charset or "").strip().lower()
    try:
        if not name or name in ("us-ascii", "ascii"):
            raise LookupError(name)
        codecs.lookup(name)
        return data.decode(name, "replace")
    except (LookupError, ValueError):  # bytes.decode refuses a codec that is no text encoding
        return data.decode("utf-8", "replace")


def part_text(fetched: FetchedPart) -> str:
    """The part's bytes as text (HTML still HTML), lines ended by LF as JMAP gives them; a cut
    part loses its broken last character."""
    part = fetched.part
    data = undo_transfer(fetched.raw, part.encoding, cut=fetched.cut)
    text = charset_text(data, part.params.get("charset")).replace("\r\n", "\n")
    return text.rstrip("\ufffd") if fetched.cut else text


def text_of(parts: Sequence[FetchedPart], cap: int | None) -> tuple[str, bool]:
    """The parts' text joined, HTML converted, cut to `cap` bytes of UTF-8, and whether that is
    less than the whole text: JMAP's `body.text_body` over the parts in its shape (so the two
    sources read a mail's text the same way, one converter budget per mail)."""
    raw = {
        "textBody": [{"partId": str(n), "type": media_type(p.part)} for n, p in enumerate(parts)],
        "bodyValues": {str(n): {"value": part_text(p), "isTruncated": p.cut}
                       for n, p in enumerate(parts)},
    }
    return body.text_body(raw, cap)
