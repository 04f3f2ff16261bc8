"""python-telegram-bot, imported only here and only on a client's first Bot API call
(`TelegramClient._bot`): an idle service that never calls Telegram does not load it (about 7 MB).

`BotApiRequest` (the transport) fills in the current call's `Exchange` (`transport.EXCHANGE`):
whether the whole request was written (httpcore's `trace` extension) and the raw `result` of an
`ok: true` answer. It raises `ErrorAnswer` (with the HTTP status) for every non-2xx answer and
`UnreadableAnswer` for a 2xx that is not `ok: true`, before PTB folds them into its own classes.
`PtbBot` is PTB's `Bot` on that transport, called with plain values; `PtbBot.failure` turns
whatever a call raised into a `TelegramSendError`.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Awaitable, Sequence
from http import HTTPStatus
from typing import Any

import httpx
from telegram import (
    Bot,
    BotCommand,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    LinkPreviewOptions,
    Message,
    User,
    WebhookInfo,
)
from telegram.error import NetworkError, TelegramError
from telegram.request import HTTPXRequest
from telegram.warnings import PTBUserWarning

from messageweave.chat.telegram.errors import FailureClass, TelegramSendError, classify
from messageweave.chat.telegram.redaction import REDACTOR
from messageweave.chat.telegram.transport import EXCHANGE, PLAIN, Exchange, Keyboard, SendOptions

_MAX_DESCRIPTION = 300


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


def _markup(keyboard: Keyboard | None) -> InlineKeyboardMarkup | None:
    if not keyboard:
        return None
    return InlineKeyboardMarkup(
        [[InlineKeyboardButton(text, callback_data=data) for text, data in row]
         for row in keyboard]
    )


class PtbBot:
    """One bot's `telegram.Bot` on its own `BotApiRequest`, every call bounded by `timeout_s`."""

    def __init__(self, token: str, base_url: str, timeout_s: float, pool_size: int) -> None:
        self._request = BotApiRequest(
            connection_pool_size=pool_size,
            connect_timeout=timeout_s,
            read_timeout=timeout_s,
            write_timeout=timeout_s,
            pool_timeout=timeout_s,
        )
        # getUpdates has a connection of its own (issue #22): a long poll holds it for up to
        # `timeout` seconds, which must not take one of the sends' connections. Its read
        # timeout is set per call (the long poll's own plus a margin).
        self._poll_request = BotApiRequest(
            connection_pool_size=1,
            connect_timeout=timeout_s,
            read_timeout=timeout_s,
            write_timeout=timeout_s,
            pool_timeout=timeout_s,
        )
        self._bot = Bot(
            token, base_url=base_url, request=self._request,
            get_updates_request=self._poll_request,
        )

    async def shutdown(self) -> None:
        await self._request.shutdown()
        await self._poll_request.shutdown()

    def send_message(
        self, chat_id: int | str, text: str, *, disable_link_preview: bool,
        options: SendOptions = PLAIN,
    ) -> Awaitable[Message]:
        preview = LinkPreviewOptions(is_disabled=True) if disable_link_preview else None
        return self._bot.send_message(
            chat_id=chat_id, text=text, link_preview_options=preview,
            message_thread_id=options.thread_id,
            disable_notification=True if options.silent else None,
            reply_markup=_markup(options.keyboard),
        )

    def answer_callback_query(self, callback_query_id: str, text: str | None) -> Awaitable[bool]:
        return self._bot.answer_callback_query(callback_query_id, text=text)

    def edit_message_reply_markup(
        self, chat_id: int | str, message_id: int, keyboard: Keyboard | None
    ) -> Awaitable[Message | bool]:
        return self._bot.edit_message_reply_markup(
            chat_id=chat_id, message_id=message_id, reply_markup=_markup(keyboard)
        )

    def get_me(self, timeout_s: float) -> Awaitable[User]:
        return self._bot.get_me(
            read_timeout=timeout_s,
            write_timeout=timeout_s,
            connect_timeout=timeout_s,
            pool_timeout=timeout_s,
        )

    def set_webhook(
        self, url: str, secret_token: str, allowed_updates: Sequence[str]
    ) -> Awaitable[bool]:
        return self._bot.set_webhook(
            url=url, secret_token=secret_token, allowed_updates=list(allowed_updates)
        )

    def get_webhook_info(self) -> Awaitable[WebhookInfo]:
        return self._bot.get_webhook_info()

    def delete_webhook(self) -> Awaitable[bool]:
        return self._bot.delete_webhook(drop_pending_updates=False)

    async def get_updates(self, offset: int | None, timeout_s: int, limit: int,
                          allowed_updates: Sequence[str], read_timeout_s: float) -> object:
        """The raw `result` of getUpdates. Not `Bot.get_updates`: it builds PTB's models of
        every update and, when one does not parse, logs the whole answer (the owner's messages)
        at CRITICAL. `do_api_request` warns that `get_updates` exists, which is the point."""
        kwargs: dict[str, Any] = {"timeout": timeout_s, "limit": limit,
                                  "allowed_updates": list(allowed_updates)}
        if offset is not None:
            kwargs["offset"] = offset
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PTBUserWarning)
            return await self._bot.do_api_request(
                "getUpdates", api_kwargs=kwargs, read_timeout=read_timeout_s,
                write_timeout=read_timeout_s, connect_timeout=read_timeout_s,
                pool_timeout=read_timeout_s,
            )

    def set_my_commands(self, commands: Sequence[tuple[str, str]]) -> Awaitable[bool]:
        return self._bot.set_my_commands([BotCommand(name, text) for name, text in commands])

    @staticmethod
    def failure(exc: Exception, exchange: Exchange) -> TelegramSendError:
        """What a call that raised `exc` amounts to, given what its exchange saw."""
        if isinstance(exc, ErrorAnswer):
            description = REDACTOR.redact(exc.description)[:_MAX_DESCRIPTION]
            failure_class = classify(exc.status, description, exc.retry_after)
            return TelegramSendError(
                failure_class,
                exc.retry_after,
                description,
                status_code=exc.status,
                maybe_sent=exc.maybe_sent,
            )
        if isinstance(exc, UnreadableAnswer):
            return TelegramSendError(
                FailureClass.TRANSIENT, None, str(exc), status_code=exc.status, maybe_sent=True
            )
        written = exchange.written
        if isinstance(exc, TimeoutError):
            when = "after" if written else "before"
            return TelegramSendError(
                FailureClass.TRANSIENT, None, f"timed out {when} the request was sent",
                maybe_sent=written,
            )
        description = REDACTOR.redact(f"{type(exc).__name__}: {exc}")[:_MAX_DESCRIPTION]
        if isinstance(exc, NetworkError):
            # PTB wraps every transport failure (and anything else do_request raises) in
            # NetworkError/TimedOut; whether the request had gone out is what the exchange saw.
            return TelegramSendError(FailureClass.TRANSIENT, None, description, maybe_sent=written)
        # PTB refusing a call before sending it, or failing on an answer it got (for an ok
        # answer to sendMessage, `TelegramClient._send_chunk` counts the delivery instead).
        return TelegramSendError(FailureClass.UNKNOWN, None, description)
