"""What a mail source (`mail.source.MailSource`) raises, whatever protocol it speaks.

The pipeline, the chat and the admin routes catch these; each source's own errors subclass
them (`mail.jmap.JmapError` is a `MailError`, `JmapTransportError` a `MailUnreachable`, …), so
a caller never asks which source it has. `source` names the protocol in a failure's reason
(`jmap: JmapTransportError`); none of them carries a password.
"""

from __future__ import annotations

from typing import ClassVar


class MailError(Exception):
    """Base of every error a mail source raises."""

    source: ClassVar[str] = "mail"


class MailUnreachable(MailError):
    """The mail server could not be reached or is unavailable for now (network, timeout, a
    5xx, JMAP's `serverUnavailable`): what a delivery waits for (`store.waiting`)."""


class MailAuthError(MailError):
    """The mail server refused the credentials."""


class MailRefused(MailError):
    """The server refused one change to one object (a flag, a move, a draft): a retry would
    not help."""

    @property
    def reason(self) -> str:
        """A word for the log, never the server's text (JMAP: the SetError type)."""
        return "refused"


class MailTooLarge(MailError):
    """A download passed the bytes the caller takes; it was stopped there."""
