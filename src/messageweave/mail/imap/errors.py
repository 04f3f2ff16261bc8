"""The errors the IMAP client raises, one class per failure, as `mail/jmap/errors.py` does.

`ImapTransportError` (network, TLS, timeout, the connection closed; `ImapTlsError` for a
certificate or handshake failure), `ImapAuthError` (the server refused the login),
`ImapProtocolError` (the server sent something that is not IMAP, or past a parser cap),
`ImapCommandError` (a NO or BAD answer, with the server's text), `ImapCapabilityError` (the
server lacks an extension a command needs) and `ImapArgumentError` (a value we refuse to send:
a mailbox name with CR/LF, say). None of them carries the password.

They are the `mail.errors` ones too, as the JMAP ones are, and nothing maps them again: the
pipeline, the chat, the watch's callers and `/ready` catch `mail.errors` classes.
- `ImapError` is a `MailError`; `ImapProtocolError` only that (a broken answer, perhaps to one
  hostile mail, says nothing of the server being out of reach);
- `ImapTransportError` a `MailUnreachable`, `ImapAuthError` a `MailAuthError`;
- `ImapCommandError`, `ImapCapabilityError` and `ImapArgumentError` a `MailRefused`: asking
  again would get the same answer. `ImapRefused` is the refusal a caller raises itself (a NO to
  a change of one mail in `mail.imap.source`, no Drafts mailbox, an unsafe header in a reply);
- `ImapTooLarge` a `MailTooLarge`.
`reason` (what the chat and the log show of a refusal) is a word of ours, never the server's
text: the class's name, `ImapCommandError`'s command and NO / BAD, `ImapRefused`'s own word.
"""

from __future__ import annotations

from typing import ClassVar

from messageweave.mail.errors import (
    MailAuthError,
    MailError,
    MailRefused,
    MailTooLarge,
    MailUnreachable,
)


class ImapError(MailError):
    """Base of every error this client raises."""

    source: ClassVar[str] = "imap"

    @property
    def reason(self) -> str:
        return type(self).__name__


class ImapTransportError(ImapError, MailUnreachable):
    """The server could not be reached, the connection broke or closed, or a command timed out.
    The connection is closed afterwards."""


class ImapTlsError(ImapTransportError):
    """The TLS handshake failed: an untrusted or wrong certificate, no common protocol."""


class ImapAuthError(ImapError, MailAuthError):
    """The server refused the username or password (or offers no way to log in safely)."""


class ImapProtocolError(ImapError):
    """The server answered something that is not IMAP, or a response past a parser cap."""


class ImapCommandError(ImapError, MailRefused):
    """A command answered NO or BAD. `command` is the command's name only (never its
    arguments); `code` the response code (`NONEXISTENT`, `TRYCREATE`, ...) or None; `reason`
    the command and the state (`APPEND NO`), without the server's text."""

    def __init__(self, command: str, state: str, text: str, code: str | None = None) -> None:
        self.command = command
        self.state = state
        self.text = text
        self.code = code
        shown = f"[{code}] {text}" if code else text
        super().__init__(f"{command} answered {state}: {shown}")

    @property
    def reason(self) -> str:
        return f"{self.command} {self.state}"


class ImapCapabilityError(ImapError, MailRefused):
    """The server does not offer an extension the operation needs (IDLE, UIDPLUS, ...)."""


class ImapArgumentError(ImapError, MailRefused, ValueError):
    """A value we will not send: it could break out of its place in the command."""


class ImapRefused(ImapError, MailRefused):
    """The server refused a change of one mail (a NO to UID STORE or UID MOVE), there is
    nowhere to make it (no archive, Drafts or Sent mailbox), or a reply cannot be made or sent
    as it is (a header value not on one clean line, an address that is not a bare addr-spec).
    `reason` is our word, never the server's text."""

    def __init__(self, reason: str, detail: str = "") -> None:
        self._reason = reason
        super().__init__(f"{reason}: {detail}" if detail else reason)

    @property
    def reason(self) -> str:
        return self._reason


class ImapTooLarge(ImapError, MailTooLarge):
    """An attachment is larger than the caller takes: refused on the size BODYSTRUCTURE gives,
    before its bytes are fetched, or when its decoded bytes pass the limit."""
