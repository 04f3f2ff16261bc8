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

from collections.abc import Awaitable, Sequence
from typing import Any

import httpx
from telegram import (
    Bot,
    BotCommand,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    InputFile,
    LinkPreviewOptions,
    Message,
    WebhookInfo,
)
from telegram.error import NetworkError, TelegramError
from telegram.request import HTTPXRequest

from messageweave.chat.telegram.errors import FailureClass, TelegramSendError, classify
from messageweave.chat.telegram.redaction import REDACTOR
from messageweave.chat.telegram.transport import (
    EXCHANGE,
    PLAIN,
    Exchange,
    Keyboard,
    NotOk,
    SendOptions,
    error_fields,
    ok_result,
)

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


def _error_answer(status: int, payload: bytes) -> ErrorAnswer:
    fields = error_fields(status, payload)
    return ErrorAnswer(status, fields.description, fields.retry_after,
                       maybe_sent=fields.maybe_sent)


def _ok_result(status: int, payload: bytes) -> object:
    """The `result` of a 2xx `{"ok": true, ...}` answer, else `UnreadableAnswer`."""
    try:
        return ok_result(payload)
    except NotOk:
        raise UnreadableAnswer(status) from None


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
        # One request object for both slots: we never poll through PTB (the poller's calls
        # are `TelegramClient`'s bare ones), and shutdown() closes it.
        self._bot = Bot(
            token, base_url=base_url, request=self._request, get_updates_request=self._request
        )

    async def shutdown(self) -> None:
        await self._request.shutdown()

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

    def send_file(
        self, chat_id: int | str, content: bytes, filename: str, media_type: str, *,
        photo: bool, thread_id: int | None, timeout_s: float | None,
    ) -> Awaitable[Message]:
        """sendPhoto or sendDocument, multipart. PTB's `InputFile` takes bytes or a file
        object it reads (synchronously) whole: the content is in memory already, bounded by
        the caller (`pipeline.reading.MAX_UPLOAD_BYTES`), and goes out as it is. The MIME type
        is the mail's, not PTB's guess from the name."""
        upload = InputFile(content, filename=filename)
        upload.mimetype = media_type
        times: dict[str, Any] = ({} if timeout_s is None else
                                 {"write_timeout": timeout_s, "read_timeout": timeout_s})
        if photo:
            return self._bot.send_photo(chat_id=chat_id, photo=upload,
                                        message_thread_id=thread_id, **times)
        return self._bot.send_document(chat_id=chat_id, document=upload,
                                       message_thread_id=thread_id,
                                       disable_content_type_detection=True, **times)

    def answer_callback_query(self, callback_query_id: str, text: str | None) -> Awaitable[bool]:
        return self._bot.answer_callback_query(callback_query_id, text=text)

    def edit_message_reply_markup(
        self, chat_id: int | str, message_id: int, keyboard: Keyboard | None
    ) -> Awaitable[Message | bool]:
        return self._bot.edit_message_reply_markup(
            chat_id=chat_id, message_id=message_id, reply_markup=_markup(keyboard)
        )

    def set_webhook(
        self, url: str, secret_token: str, allowed_updates: Sequence[str]
    ) -> Awaitable[bool]:
        return self._bot.set_webhook(
            url=url, secret_token=secret_token, allowed_updates=list(allowed_updates)
        )

    def get_webhook_info(self) -> Awaitable[WebhookInfo]:
        return self._bot.get_webhook_info()

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
