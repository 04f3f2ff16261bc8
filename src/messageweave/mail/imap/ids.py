"""What the chat, the buttons and the ledger call an IMAP mail (SPEC Part F.4): an opaque id of
`[A-Za-z0-9_-]` that names its mailbox, the mailbox's UIDVALIDITY and the mail's UID.

`i` + 8 characters naming the mailbox + UIDVALIDITY in base 36 + `_` + UID in base 36, e.g.
`iq3Jx0Ztk1e0fkz_2n9c`: at most 24 characters, so every button of a notification and of a Read
reply fits Telegram's 64 bytes (`pipeline.buttons.MAX_FILE_EMAIL_ID_BYTES` is 46).

The mailbox part is the first 48 bits of SHA-256 over the mailbox's name (UTF-8), base64url: a
name can be long and hold any character, the id must not. The name is found again by hashing
the account's mailboxes (`mailbox_key`), so nothing is stored to map one to the other; two names
of one account sharing 48 bits is a chance of about one in 10^14 per pair.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass

PREFIX = "i"
BOX_CHARS = 8
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"
_MAX_NUMBER = 2**32 - 1  # UIDVALIDITY and UID are nz-number: 32 bits (RFC 9051 §9)


@dataclass(frozen=True)
class ImapMailId:
    box: str  # `mailbox_key` of the mailbox's name
    uidvalidity: int
    uid: int

    def __str__(self) -> str:
        return f"{PREFIX}{self.box}{_base36(self.uidvalidity)}_{_base36(self.uid)}"


def mailbox_key(name: str) -> str:
    """The 8 characters that stand for mailbox `name` in an id."""
    digest = hashlib.sha256(name.encode("utf-8")).digest()
    return base64.urlsafe_b64encode(digest[:6]).decode("ascii")


def mail_id(mailbox: str, uidvalidity: int, uid: int) -> str:
    if not (0 < uidvalidity <= _MAX_NUMBER and 0 < uid <= _MAX_NUMBER):
        raise ValueError("UIDVALIDITY and UID are numbers from 1 to 2^32 - 1")
    return str(ImapMailId(mailbox_key(mailbox), uidvalidity, uid))


def parse_mail_id(text: str) -> ImapMailId | None:
    """The parts of an id `mail_id` made; None for anything else (a JMAP id, a forged one)."""
    if len(text) > 1 + BOX_CHARS + 15 or not text.startswith(PREFIX):
        return None
    box, rest = text[1:1 + BOX_CHARS], text[1 + BOX_CHARS:]
    validity, sep, uid = rest.partition("_")
    if len(box) != BOX_CHARS or not sep or not _is_key(box):
        return None
    numbers = _number(validity), _number(uid)
    if numbers[0] is None or numbers[1] is None:
        return None
    return ImapMailId(box, numbers[0], numbers[1])


def _base36(n: int) -> str:
    out = ""
    while True:
        n, digit = divmod(n, 36)
        out = _DIGITS[digit] + out
        if not n:
            return out


def _number(text: str) -> int | None:
    if not text or len(text) > 7 or any(c not in _DIGITS for c in text) or text[0] == "0":
        return None
    value = int(text, 36)
    return value if value <= _MAX_NUMBER else None


def _is_key(box: str) -> bool:
    return all(c.isascii() and (c.isalnum() or c in "-_") for c in box)
