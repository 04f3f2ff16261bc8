"""The IMAP side's errors are one set, `mail/imap/errors.py`, and they are the `mail.errors`
ones (issue #33 clean-up): nothing under `mail/imap/` maps them to other classes again."""

from __future__ import annotations

import ast
from pathlib import Path

from messageweave.mail import imap
from messageweave.mail.errors import MailAuthError, MailRefused, MailUnreachable
from messageweave.mail.imap.errors import (
    ImapArgumentError,
    ImapAuthError,
    ImapCapabilityError,
    ImapCommandError,
    ImapProtocolError,
    ImapRefused,
    ImapTransportError,
)

IMAP = Path(imap.__file__).resolve().parent
_MAIL_ERRORS = {"MailError", "MailUnreachable", "MailAuthError", "MailRefused", "MailTooLarge"}


def test_no_imap_module_but_errors_defines_a_mail_error() -> None:
    """Catches: a second (or third) map from the IMAP client's errors to `mail.errors` classes
    of its own (`watch.mail_error` with an `ImapRefused` that was a `MailAuthError`, the
    replies' `ReplyUnreachable` / `ReplyRefused`), which drift apart from `mail/imap/errors.py`
    and from each other."""
    defined = {}
    for path in sorted(IMAP.glob("*.py")):
        if path.name == "errors.py":
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                bases = {b.id for b in node.bases if isinstance(b, ast.Name)}
                if bases & (_MAIL_ERRORS | {"ImapError"}):
                    defined[node.name] = path.name
    assert defined == {}


def test_each_imap_error_is_the_mail_error_its_callers_catch() -> None:
    """Catches: a NO to a reply's command that the chat no longer shows as refused (with the
    command and NO, never the server's text), a refused login or a lost connection that is
    not the source-neutral kind, or a broken answer (perhaps to one hostile mail) taken for
    the server being out of reach."""
    refused = ImapCommandError("APPEND", "NO", "over quota: secret detail", "OVERQUOTA")
    assert isinstance(refused, MailRefused) and refused.reason == "APPEND NO"
    assert isinstance(ImapRefused("no drafts mailbox"), MailRefused)
    assert ImapRefused("no drafts mailbox").reason == "no drafts mailbox"
    assert ImapCapabilityError("no IDLE").reason == "ImapCapabilityError"
    unsafe = ImapArgumentError("CR in a name")
    assert isinstance(unsafe, MailRefused) and isinstance(unsafe, ValueError)
    assert isinstance(ImapTransportError("closed"), MailUnreachable)
    assert isinstance(ImapAuthError("refused"), MailAuthError)
    assert not isinstance(ImapProtocolError("not IMAP"), MailUnreachable | MailRefused)
