"""Keeping the bot token out of logs.

The loggers that would print it (httpx logs each request URL at INFO, httpcore's DEBUG lines
name the connection) get a filter that redacts every registered token.
"""

from __future__ import annotations

import logging

# Loggers that see request URLs (httpx, httpcore).
_GUARDED_LOGGERS = (
    "httpx",
    "httpcore.connection",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.proxy",
    "httpcore.socks",
)
_REDACTED = "<redacted>"


class TokenRedactor(logging.Filter):
    """Removes registered bot tokens from log records."""

    def __init__(self) -> None:
        super().__init__()
        # Replaced, never mutated, so records logged from other threads see a stable tuple.
        self._secrets: tuple[str, ...] = ()
        self._installed = False

    def register(self, token: str) -> None:
        _, _, secret_part = token.partition(":")
        new = {token, secret_part} if len(secret_part) >= 8 else {token}
        self._secrets = tuple(sorted(new.union(self._secrets), key=len, reverse=True))
        if not self._installed:
            for name in _GUARDED_LOGGERS:
                logging.getLogger(name).addFilter(self)
            self._installed = True

    def redact(self, text: str) -> str:
        for secret in self._secrets:  # longest first: the whole token before its secret part
            text = text.replace(secret, _REDACTED)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string is the handler's problem, not ours
            return True
        redacted = self.redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        return True


REDACTOR = TokenRedactor()
