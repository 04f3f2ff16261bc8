"""What we send: every argument of a command is built here, so no caller's text can end a
command early or start another one.

- `Text` wraps a string from a user or a mail (search text, a password): it goes as a quoted
  string when it is short printable ASCII, else as a literal (`Literal`); CR, LF and NUL are
  never put in a quoted string.
- `mailbox()` encodes a mailbox name in modified UTF-7 (RFC 3501 §5.1.3) and refuses CR, LF and
  NUL (`ImapArgumentError`); `decode_mailbox()` reads one back.
- `atom()` checks a token we spell ourselves (`UID`, `1:*`, `\\Seen`, `BODY.PEEK[1]`).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from dataclasses import dataclass

from messageweave.mail.imap.errors import ImapArgumentError

MAX_QUOTED = 1000  # longer strings go as literals
_QUOTABLE = re.compile(r"[\x20-\x7e]*")
_ATOM_TOKEN = re.compile(
    r"\\?[A-Za-z0-9$._:*,<>\-+]+"  # atoms, flags, sequence sets, dates
    r"(\[[A-Za-z0-9. ()\-]*\](<\d+(\.\d+)?>)?)?"  # BODY.PEEK[HEADER.FIELDS (A B)]<0.100>
)
_MUTF7_RUN = re.compile(r"[^\x20-\x7e]+|&")


@dataclass(frozen=True)
class Literal:
    """Bytes sent as `{n}` + CRLF + the bytes (after the server's `+`, unless LITERAL+)."""

    data: bytes


@dataclass(frozen=True)
class Text:
    """A string of someone else's: quoted or sent as a literal, never spliced in raw."""

    value: str


WireArg = bytes | Literal


def atom(token: str) -> bytes:
    """A token of our own spelling, checked: nothing in it can end the command."""
    if not _ATOM_TOKEN.fullmatch(token):
        raise ImapArgumentError(f"not an IMAP atom: {token!r}")
    return token.encode("ascii")


def string(value: str | Text) -> WireArg:
    """A quoted string, or a literal for long, non-ASCII or control-character text."""
    text = value.value if isinstance(value, Text) else value
    if len(text) <= MAX_QUOTED and _QUOTABLE.fullmatch(text):
        return b'"' + text.replace("\\", "\\\\").replace('"', '\\"').encode("ascii") + b'"'
    return Literal(text.encode("utf-8"))


def mailbox(name: str, *, utf8: bool = False) -> WireArg:
    """A mailbox name: modified UTF-7 (or UTF-8 once UTF8=ACCEPT is enabled), quoted."""
    if not name or any(c in name for c in "\r\n\0"):
        raise ImapArgumentError("a mailbox name may not be empty or hold CR, LF or NUL")
    return string(name if utf8 else encode_mailbox(name))


def encode_mailbox(name: str) -> str:
    """Modified UTF-7: `&` is `&-`, other non-ASCII runs are `&` + base64 of UTF-16BE + `-`."""

    def run(found: re.Match[str]) -> str:
        chunk = found.group()
        if chunk == "&":
            return "&-"
        b64 = base64.b64encode(chunk.encode("utf-16-be")).decode("ascii").rstrip("=")
        return "&" + b64.replace("/", ",") + "-"

    return _MUTF7_RUN.sub(run, name)


def decode_mailbox(raw: bytes) -> str:
    """A mailbox name as LIST sends it; a name that is not valid modified UTF-7 is kept as
    UTF-8 text (servers with UTF8=ACCEPT, or broken ones)."""
    text = raw.decode("utf-8", "replace")
    if "&" not in text or not text.isascii():
        return text
    out: list[str] = []
    for i, piece in enumerate(text.split("&")):
        if i == 0:
            out.append(piece)
            continue
        encoded, dash, rest = piece.partition("-")
        if not dash:
            return text
        if not encoded:
            out.append("&" + rest)
            continue
        try:
            padded = encoded.replace(",", "/") + "=" * (-len(encoded) % 4)
            out.append(base64.b64decode(padded, validate=True).decode("utf-16-be") + rest)
        except (ValueError, UnicodeDecodeError):
            return text
    return "".join(out)


def uid_set(uids: Iterable[int]) -> bytes:
    """`1,3:5,9` for the UIDs given (sorted, ranges joined)."""
    ordered = sorted(set(uids))
    if not ordered or ordered[0] < 1:
        raise ImapArgumentError("a UID set needs at least one UID, each at least 1")
    ranges: list[str] = []
    start = prev = ordered[0]
    for uid in [*ordered[1:], 0]:
        if uid == prev + 1:
            prev = uid
            continue
        ranges.append(str(start) if start == prev else f"{start}:{prev}")
        start = prev = uid
    return ",".join(ranges).encode("ascii")
