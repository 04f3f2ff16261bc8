"""How a Bot API call failed: `TelegramSendError`, its `FailureClass`, and `classify`, which
sorts Telegram's error answers into those classes."""

from __future__ import annotations

import enum
import re
from http import HTTPStatus


class FailureClass(enum.StrEnum):
    TRANSIENT = "transient"
    RATE_LIMIT = "rate_limit"
    AUTH = "auth"
    PERMISSION = "permission"
    NOT_FOUND = "not_found"
    INVALID_PAYLOAD = "invalid_payload"
    CONFLICT = "conflict"
    UNKNOWN = "unknown"

    @property
    def retryable(self) -> bool:
        return self in (FailureClass.TRANSIENT, FailureClass.RATE_LIMIT)


class TelegramSendError(Exception):
    """A failed Bot API call. `description` is Telegram's own text with the token removed.

    `maybe_sent` is True when the failed call may still have reached Telegram (the request was
    written, then the answer was lost: a read timeout, a connection dropped mid-answer). Only
    such a failure makes the delivery's outcome unknown (`unknown_after_send`); every other
    failure is known not to have sent the chunk it names.

    Set True exactly when the whole request had been written and no readable Bot API answer came
    back: a read timeout, the connection reset or closed while waiting, the overall timeout
    firing after the write, a 2xx answer that is not `{"ok": true, "result": ...}`, or a non-JSON
    502/504 page (a proxy that may have forwarded the call). Always `transient`. False when the
    request certainly did not go out (connect refused or timed out, DNS failure, no free pooled
    connection, a write that did not finish) and for every Bot API error answer (a 4xx/5xx with
    a JSON body: Telegram did not send).
    """

    def __init__(
        self,
        failure_class: FailureClass,
        retry_after: float | None = None,
        description: str = "",
        *,
        status_code: int | None = None,
        maybe_sent: bool = False,
        unreached: str | None = None,
    ) -> None:
        detail = f"telegram {failure_class}: {description}" if description else failure_class
        if retry_after is not None:
            detail = f"{detail} (retry after {retry_after:g} s)"
        super().__init__(detail)
        self.failure_class = failure_class
        self.retry_after = retry_after
        self.description = description
        self.status_code = status_code
        self.maybe_sent = maybe_sent
        # A call that got no answer: why (`logs.transport_kind`: `timeout`, `tls`, `refused`,
        # `unreachable`; `bad_url` for a token no URL can hold). None when Telegram answered.
        self.unreached = unreached

    @property
    def retryable(self) -> bool:
        return self.failure_class.retryable

    def __repr__(self) -> str:
        return (
            f"TelegramSendError({self.failure_class.value!r}, retry_after={self.retry_after!r}, "
            f"description={self.description!r}, status_code={self.status_code!r}, "
            f"maybe_sent={self.maybe_sent!r})"
        )


_NOT_FOUND = re.compile(r"chat not found|user not found|peer_id_invalid", re.IGNORECASE)


def classify(status: int, description: str, retry_after: float | None = None) -> FailureClass:
    """Map a Bot API error answer to its failure class (reference §7: delivery pipeline, §7.11).

    404 counts as `auth`: Telegram answers it to a malformed token (and to a wrong base URL),
    which an operator has to fix just like a revoked token (401).
    """
    if status == HTTPStatus.TOO_MANY_REQUESTS or retry_after is not None:
        return FailureClass.RATE_LIMIT
    if status in (HTTPStatus.UNAUTHORIZED, HTTPStatus.NOT_FOUND):
        return FailureClass.AUTH
    if status == HTTPStatus.FORBIDDEN:
        return FailureClass.PERMISSION
    if status == HTTPStatus.BAD_REQUEST:
        found = _NOT_FOUND.search(description)
        return FailureClass.NOT_FOUND if found else FailureClass.INVALID_PAYLOAD
    if status == HTTPStatus.CONFLICT:
        return FailureClass.CONFLICT
    if status == HTTPStatus.REQUEST_ENTITY_TOO_LARGE:
        return FailureClass.INVALID_PAYLOAD
    if status >= 500:
        return FailureClass.TRANSIENT
    return FailureClass.UNKNOWN
