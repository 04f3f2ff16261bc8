"""The new-mail notification: exactly three lines (reference §7: bot language, §7.5)."""

from __future__ import annotations

import datetime as dt
import zoneinfo

from messageweave.mail.jmap import EmailMeta

UNKNOWN = "unknown"
NO_SUBJECT = "(no subject)"
TIME_FORMAT = "%Y-%m-%d %H:%M"


def format_received(received_at: int | None, timezone: str) -> str:
    """`received_at` (Unix seconds) in the IANA zone, 24-hour; `unknown` when absent."""
    if received_at is None:
        return UNKNOWN
    zone = zoneinfo.ZoneInfo(timezone)
    return dt.datetime.fromtimestamp(received_at, tz=zone).strftime(TIME_FORMAT)


def _one_line(value: str | None, fallback: str) -> str:
    """The value on one line (a stray line break would add a fourth line), or the fallback."""
    if value is None or not value.strip():
        return fallback
    return " ".join(value.splitlines())


def render_notification(meta: EmailMeta, timezone: str) -> str:
    sender = _one_line(meta.sender, UNKNOWN)
    subject = _one_line(meta.subject, NO_SUBJECT)
    received = format_received(meta.received_at, timezone)
    return f"From: {sender}\nSubject: {subject}\nReceived: {received}"
