"""The new-mail notification: exactly three lines (reference §7: bot language, §7.5)."""

from __future__ import annotations

from messageweave.chat.texts import zoned_time
from messageweave.mail.records import EmailMeta
from messageweave.untrusted import NAME_MAX_CHARS, SUBJECT_MAX_CHARS, clean

UNKNOWN = "unknown"
NO_SUBJECT = "(no subject)"


def format_received(received_at: int | None, timezone: str) -> str:
    """`received_at` (Unix seconds) in the IANA zone, 24-hour, the zone named
    (`texts.zoned_time`); `unknown` when absent."""
    if received_at is None:
        return UNKNOWN
    return zoned_time(received_at, timezone)


def render_notification(meta: EmailMeta, timezone: str) -> str:
    """From, Subject, Received: the sender's text cleaned (`untrusted.clean`: a line break in
    it would add a fourth line, a U+202E turn the line around)."""
    sender = clean(meta.sender, NAME_MAX_CHARS) or UNKNOWN
    subject = clean(meta.subject, SUBJECT_MAX_CHARS) or NO_SUBJECT
    received = format_received(meta.received_at, timezone)
    return f"From: {sender}\nSubject: {subject}\nReceived: {received}"
