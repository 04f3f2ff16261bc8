"""What the wire said of one Bot API call: whether the whole request was written (`Exchange`,
fed by httpcore's `trace` extension) and what the answer holds (`error_fields`, `ok_result`,
`message_id_of`). `TelegramClient.call` reads every answer through these, for every method."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

# An inline keyboard: rows of (button text, callback_data) pairs.
Keyboard = tuple[tuple[tuple[str, str], ...], ...]


@dataclass(frozen=True)
class SendOptions:
    """How one message is sent besides its text (issue #16): the forum topic
    (`message_thread_id`), `disable_notification`, and the inline keyboard under it."""

    thread_id: int | None = None
    silent: bool = False
    keyboard: Keyboard | None = None


PLAIN = SendOptions()

UNKNOWN_MESSAGE_ID = 0
"""Stands in `send_text`'s result for a chunk Telegram accepted (`ok: true`) without a readable
`message_id` in its answer. Telegram numbers messages from 1, so no real message has id 0."""


def markup(keyboard: Keyboard | None) -> dict[str, object] | None:
    """The Bot API's `reply_markup` for `keyboard`; None removes a keyboard (or sends none)."""
    if not keyboard:
        return None
    return {"inline_keyboard": [[{"text": text, "callback_data": data} for text, data in row]
                                for row in keyboard]}


@dataclass
class Exchange:
    """What the transport saw of one Bot API call being written."""

    written: bool = False  # the whole request went into the socket
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


def message_id_of(result: object) -> int:
    """`result.message_id` of an ok answer, or `UNKNOWN_MESSAGE_ID`: an `ok: true` answer is a
    delivery whatever its `result` holds."""
    raw = result.get("message_id") if isinstance(result, dict) else None
    if isinstance(raw, str) and raw.isascii() and raw.isdigit():
        raw = int(raw)
    if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0:
        return raw
    return UNKNOWN_MESSAGE_ID


# A proxy's "the upstream failed / did not answer in time" page: it may have forwarded the call.
MAYBE_FORWARDED = (HTTPStatus.BAD_GATEWAY, HTTPStatus.GATEWAY_TIMEOUT)


@dataclass(frozen=True)
class ErrorFields:
    """What a non-2xx Bot API answer says: its description, `parameters.retry_after`, and
    whether the call may have been forwarded all the same (a proxy's non-JSON 502/504)."""

    description: str
    retry_after: float | None
    maybe_sent: bool = False


def error_fields(status: int, payload: bytes) -> ErrorFields:
    try:
        body = json.loads(payload)
    except ValueError:
        body = None
    if not isinstance(body, dict):  # e.g. an HTML page from a proxy in front of the Bot API
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = f"HTTP {status}"
        return ErrorFields(phrase, None, maybe_sent=status in MAYBE_FORWARDED)
    description = str(body.get("description") or f"HTTP {status}")
    parameters = body.get("parameters")
    raw_retry = parameters.get("retry_after") if isinstance(parameters, dict) else None
    retry_after = float(raw_retry) if isinstance(raw_retry, int | float) else None
    return ErrorFields(description, retry_after)


class NotOk(ValueError):
    """A 2xx answer that is not `{"ok": true, "result": ...}`."""


def ok_result(payload: bytes) -> object:
    """The `result` of a 2xx `{"ok": true, ...}` answer, else `NotOk`."""
    try:
        body = json.loads(payload)
    except ValueError:  # not JSON, or not UTF-8
        body = None
    if not isinstance(body, dict) or body.get("ok") is not True or "result" not in body:
        raise NotOk
    return body["result"]
