"""Text from a mail, made safe to print or to put in a header (issue #32, findings 1 and 3).

A mail's subject, display names, attachment names and Message-IDs are the sender's choice.
`clean` is the one place they are cleaned before the bot prints them (Read, the reply's
confirm step, search hits, notifications, digests) or before they go into a draft's headers:

- control characters (Unicode Cc: CR, LF, NUL, ...), format characters (Cf: U+202E and the
  other bidi overrides, U+200B zero-width space, soft hyphen, ...), lone surrogates (Cs) and
  the line and paragraph separators (Zl, Zp) become a space: a name can no longer start a new
  header line, hide a line break in the confirm step, or reverse the text around it. A space
  rather than U+FFFD, so that `Bob\\r\\nBcc: x` reads as one harmless line; the price is that an
  emoji joined by U+200D shows as its parts;
- every run of whitespace becomes one space, and the ends are stripped;
- the result is at most `limit` characters (the cut ends with `…`).

It is linear in its input: `str.isprintable` (C) decides the common case, and no more than
`INPUT_CAP` characters are looked at one by one (what is beyond is dropped first: a header value
longer than that is not one anybody means).

`plain_address` accepts an address only when it is a bare addr-spec (`local@domain`, nothing a
header parser could read as a second address or a name), and `message_ids` keeps the
Message-IDs that are `<id>`-shaped: printable ASCII, no space, no bracket.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

NAME_MAX_CHARS = 200
SUBJECT_MAX_CHARS = 500
INPUT_CAP = 64 * 1024  # characters examined one by one; more is dropped before cleaning
MAX_MESSAGE_ID_CHARS = 250
MAX_REFERENCES = 30  # the newest Message-IDs of References a reply carries on
ELLIPSIS = "…"
_REPLACED = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
# One `@`, no whitespace, no character a header parser reads as structure (RFC 5322 specials),
# at most 64 before the `@` and 255 after it (RFC 5321 §4.5.3.1).
_ADDR_SPEC = re.compile(r'[^\s@<>()\[\]\\,;:"]{1,64}@[^\s@<>()\[\]\\,;:"]{1,255}')
_MESSAGE_ID = re.compile(r"[!-;=?-~]+")  # printable ASCII without space, `<` and `>`


def clean(value: str | None, limit: int = NAME_MAX_CHARS) -> str:
    """`value` on one line, without control or format characters, at most `limit` long."""
    if not value:
        return ""
    if not value.isprintable():
        value = "".join(" " if unicodedata.category(c) in _REPLACED else c
                        for c in value[:INPUT_CAP])
    text = " ".join(value.split())
    return text if len(text) <= limit else text[:limit - 1].rstrip() + ELLIPSIS


def plain_address(value: str | None) -> str | None:
    """`value` when it is a bare addr-spec that is printable (no control, format or space
    character), else None."""
    if not value or len(value) > 320 or not value.isprintable():
        return None
    return value if _ADDR_SPEC.fullmatch(value) and not value.endswith(".") else None


def message_id(value: str) -> str | None:
    """A Message-ID without its angle brackets, when it is `<id>`-shaped; else None."""
    value = value.strip()
    if value.startswith("<") and value.endswith(">"):
        value = value[1:-1]
    if not value or len(value) > MAX_MESSAGE_ID_CHARS or not _MESSAGE_ID.fullmatch(value):
        return None
    return value


def message_ids(values: Iterable[str], most: int = MAX_REFERENCES) -> tuple[str, ...]:
    """The `<id>`-shaped ones of `values`, each once, the last `most` of them."""
    kept = dict.fromkeys(v for v in map(message_id, values) if v is not None)
    return tuple(kept)[-most:]
