"""What the wire said of one Bot API call, whatever python-telegram-bot makes of it.

`BotApiRequest` (the transport) records per call, in the `Exchange` that `EXCHANGE` holds for
it, whether the whole request was written (httpcore's `trace` extension) and the raw `result` of
an `ok: true` answer. It raises `ErrorAnswer` (with the HTTP status) for every non-2xx answer and
`UnreadableAnswer` for a 2xx that is not `ok: true`, before PTB folds them into its own classes.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import httpx
from telegram.error import TelegramError
from telegram.request import HTTPXRequest

UNKNOWN_MESSAGE_ID = 0
"""Stands in `send_text`'s result for a chunk Telegram accepted (`ok: true`) without a readable
`message_id` in its answer. Telegram numbers messages from 1, so no real message has id 0."""


class ErrorAnswer(TelegramError):
    """A non-2xx Bot API answer, raised before PTB folds the status code into its own classes."""

    def __init__(
        self, status: int, description: str, retry_after: float | None, *, maybe_sent: bool = False
    ) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.retry_after = retry_after
        self.maybe_sent = maybe_sent


class UnreadableAnswer(TelegramError):
    """A 2xx answer that is not `{"ok": true, "result": ...}`: the call may have acted or not."""

    def __init__(self, status: int) -> None:
        super().__init__(f"unreadable answer (HTTP {status})")
        self.status = status


# A proxy's "the upstream failed / did not answer in time" page: it may have forwarded the call.
_MAYBE_FORWARDED = (HTTPStatus.BAD_GATEWAY, HTTPStatus.GATEWAY_TIMEOUT)


def _error_answer(status: int, payload: bytes) -> ErrorAnswer:
    try:
        body = json.loads(payload)
    except ValueError:
        body = None
    if not isinstance(body, dict):  # e.g. an HTML page from a proxy in front of the Bot API
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = f"HTTP {status}"
        return ErrorAnswer(status, phrase, None, maybe_sent=status in _MAYBE_FORWARDED)
    description = str(body.get("description") or f"HTTP {status}")
    parameters = body.get("parameters")
    raw_retry = parameters.get("retry_after") if isinstance(parameters, dict) else None
    retry_after = float(raw_retry) if isinstance(raw_retry, int | float) else None
    return ErrorAnswer(status, description, retry_after)


def _ok_result(status: int, payload: bytes) -> object:
    """The `result` of a 2xx `{"ok": true, ...}` answer, else `UnreadableAnswer`."""
    try:
        body = json.loads(payload)
    except ValueError:  # not JSON, or not UTF-8
        body = None
    if not isinstance(body, dict) or body.get("ok") is not True or "result" not in body:
        raise UnreadableAnswer(status)
    return body["result"]


@dataclass
class Exchange:
    """What the transport saw of one Bot API call (`EXCHANGE` holds the current call's)."""

    written: bool = False  # the whole request went into the socket
    answered: bool = False  # a 2xx `ok: true` answer came back
    result: object = None  # its raw `result`
    _writing: bool = field(default=False, repr=False)

    async def trace(self, event: str, info: Mapping[str, Any]) -> None:
        """httpcore's `trace` extension: `http11.send_request_body.complete` = all written."""
        phase, _, stage = event.rpartition(".")
        if not phase.endswith(".send_request_body"):
            return
        if stage == "started":
            # Through a proxy the tunnel's CONNECT request reports the same events first.
            self._writing = getattr(info.get("request"), "method", b"") != b"CONNECT"
        elif stage == "complete" and self._writing:
            self.written = True

    @property
    def message_id(self) -> int:
        """`result.message_id` of the raw answer, or `UNKNOWN_MESSAGE_ID`."""
        raw = self.result.get("message_id") if isinstance(self.result, dict) else None
        if isinstance(raw, str) and raw.isascii() and raw.isdigit():
            raw = int(raw)
        if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0:
            return raw
        return UNKNOWN_MESSAGE_ID


# One per Bot API call, set by `TelegramClient._call`; each task has its own context, so
# concurrent calls on the shared request object never see each other's exchange.
EXCHANGE: contextvars.ContextVar[Exchange | None] = contextvars.ContextVar(
    "messageweave_telegram_exchange", default=None
)


async def _trace_exchange(request: httpx.Request) -> None:
    """httpx request hook: let the current call's exchange watch the request being written."""
    exchange = EXCHANGE.get()
    if exchange is not None:
        request.extensions["trace"] = exchange.trace


class BotApiRequest(HTTPXRequest):
    """HTTPXRequest that raises `ErrorAnswer` (with the HTTP status) for every non-2xx answer
    and `UnreadableAnswer` for a 2xx that is not `ok: true`, and records the raw `result`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs, httpx_kwargs={"event_hooks": {"request": [_trace_exchange]}})

    async def do_request(self, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
        status, payload = await super().do_request(*args, **kwargs)
        if not 200 <= status <= 299:
            raise _error_answer(status, payload)
        result = _ok_result(status, payload)
        exchange = EXCHANGE.get()
        if exchange is not None:
            exchange.answered, exchange.result = True, result
        return status, payload
