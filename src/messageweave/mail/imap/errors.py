"""The errors the IMAP client raises, one class per failure, as `mail/jmap/errors.py` does.

`ImapTransportError` (network, TLS, timeout, the connection closed; `ImapTlsError` for a
certificate or handshake failure), `ImapAuthError` (the server refused the login),
`ImapProtocolError` (the server sent something that is not IMAP, or past a parser cap),
`ImapCommandError` (a NO or BAD answer, with the server's text), `ImapCapabilityError` (the
server lacks an extension a command needs) and `ImapArgumentError` (a value we refuse to send:
a mailbox name with CR/LF, say). None of them carries the password.
"""

from __future__ import annotations


class ImapError(Exception):
    """Base of every error this client raises."""


class ImapTransportError(ImapError):
    """The server could not be reached, the connection broke or closed, or a command timed out.
    The connection is closed afterwards."""


class ImapTlsError(ImapTransportError):
    """The TLS handshake failed: an untrusted or wrong certificate, no common protocol."""


class ImapAuthError(ImapError):
    """The server refused the username or password (or offers no way to log in safely)."""


class ImapProtocolError(ImapError):
    """The server answered something that is not IMAP, or a response past a parser cap."""


class ImapCommandError(ImapError):
    """A command answered NO or BAD. `command` is the command's name only (never its
    arguments); `code` the response code (`NONEXISTENT`, `TRYCREATE`, ...) or None."""

    def __init__(self, command: str, state: str, text: str, code: str | None = None) -> None:
        self.command = command
        self.state = state
        self.text = text
        self.code = code
        shown = f"[{code}] {text}" if code else text
        super().__init__(f"{command} answered {state}: {shown}")


class ImapCapabilityError(ImapError):
    """The server does not offer an extension the operation needs (IDLE, UIDPLUS, ...)."""


class ImapArgumentError(ImapError, ValueError):
    """A value we will not send: it could break out of its place in the command."""
