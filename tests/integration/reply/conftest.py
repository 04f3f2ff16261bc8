"""Fixtures for replying from the chat (issue #25): a Cyrus of its own that relays JMAP
`EmailSubmission` to the loopback SMTP sink (`tests/peers/smtp.py`), and the app served over
HTTPS against it, reached by the Bot API emulator (the conversation tests' `served`).

The Cyrus here overrides the session's `cyrus` fixture for this directory only: the other
tests keep a Cyrus without relay (its default backend, sendmail, would try to deliver)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers import CYRUS_PASSWORD, CYRUS_USER
from tests.peers.cyrus import CyrusNotInstalled, CyrusServer, running
from tests.peers.smtp import SmtpSink, smtp_sink

__all__ = ["smtp_sink"]


@pytest.fixture(scope="session")
def cyrus(smtp_sink: SmtpSink) -> Iterator[CyrusServer]:
    """A real Cyrus whose submissions reach `smtp_sink` (fails, never skips, when not
    installed)."""
    try:
        with running("mw-cyrus-reply-", users={CYRUS_USER: CYRUS_PASSWORD},
                     smtp_host=smtp_sink.smtp_host) as server:
            yield server
    except CyrusNotInstalled as exc:
        pytest.fail(str(exc), pytrace=False)
