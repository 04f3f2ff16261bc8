"""IMAP (RFC 9051 / RFC 3501): a thin async client of our own, on asyncio streams.

Why not a library: aioimaplib, the one well-kept asyncio IMAP client, is GPL-3.0 (the project is
MIT); aioimap and asocksimap wrap it. imapclient (BSD) and imap-tools (Apache-2.0) are built on
the standard library's blocking imaplib: a thread per connection, which issue #33 rules out, and
imaplib hands back raw lines whose literals the caller must re-assemble. So, as the JMAP client
is a thin layer on httpx, this one is a thin layer on `asyncio.open_connection` with a real
response parser (`parser.py`, fuzzed in tests/unit/test_imap_parser.py) and typed readers of
what it uses (`responses.py`).
"""

from messageweave.config.fields import Security
from messageweave.mail.imap.client import Answer, ImapClient
from messageweave.mail.imap.errors import (
    ImapArgumentError,
    ImapAuthError,
    ImapCapabilityError,
    ImapCommandError,
    ImapError,
    ImapProtocolError,
    ImapTlsError,
    ImapTransportError,
)
from messageweave.mail.imap.mailbox import Copied, MailboxState
from messageweave.mail.imap.parser import Limits
from messageweave.mail.imap.responses import BodyPart, Envelope, Fetched, ImapAddress, MailboxInfo
from messageweave.mail.imap.wire import Text

__all__ = [
    "Answer",
    "BodyPart",
    "Copied",
    "Envelope",
    "Fetched",
    "ImapAddress",
    "ImapArgumentError",
    "ImapAuthError",
    "ImapCapabilityError",
    "ImapClient",
    "ImapCommandError",
    "ImapError",
    "ImapProtocolError",
    "ImapTlsError",
    "ImapTransportError",
    "Limits",
    "MailboxInfo",
    "MailboxState",
    "Security",
    "Text",
]
