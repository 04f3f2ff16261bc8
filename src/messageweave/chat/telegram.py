"""Outbound Telegram: plain-text sends split to Telegram's limit, failures sorted into classes.

`TelegramClient` wraps python-telegram-bot's `Bot` (pointed at `{api_base_url}/bot`, so a local
Bot API server or the test emulator works). It does not retry: every failure surfaces as a
`TelegramSendError` whose `failure_class` tells the pipeline whether to back off and retry
(`transient`, `rate_limit`) or give up (everything else), and whose `maybe_sent` tells it whether
the message may have been delivered all the same.

What a send did is read from the wire, not from PTB's models: `_Request` (the transport) records
per call, in the `_Exchange` that `_EXCHANGE` holds for it, whether the whole request was written
(httpcore's `trace` extension) and the raw `result` of an `ok: true` answer. So an answer PTB
cannot turn into a `Message` is still a delivery with its id, and a failure is `maybe_sent`
exactly when the request was written and no readable answer came back.

The bot token is a credential. It never appears in our exceptions or reprs, and the loggers that
would print it (httpx logs each request URL at INFO, PTB logs the API URL at DEBUG) get a filter
that redacts it. PTB's DEBUG call log also carries message text, so it is dropped.
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
import json
import logging
import re
import unicodedata
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from types import TracebackType
from typing import Any, TypeVar

import httpx
from telegram import Bot, BotCommand, LinkPreviewOptions
from telegram.error import NetworkError, TelegramError
from telegram.request import HTTPXRequest

DEFAULT_API_BASE_URL = "https://api.telegram.org"
DEFAULT_TIMEOUT_S = 10.0
PROBE_TIMEOUT_S = 3.0
MAX_MESSAGE_UTF16 = 4096
_CONNECTION_POOL_SIZE = 8
_MAX_DESCRIPTION = 300
UNKNOWN_MESSAGE_ID = 0
"""Stands in `send_text`'s result for a chunk Telegram accepted (`ok: true`) without a readable
`message_id` in its answer. Telegram numbers messages from 1, so no real message has id 0."""

T = TypeVar("T")
log = logging.getLogger(__name__)


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

    `sent_message_ids` lists the chunks of a long text that were delivered before the failure,
    so a retry can resume with `send_text(..., start_chunk=len(sent_message_ids))`.

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
        sent_message_ids: Sequence[int] = (),
        maybe_sent: bool = False,
    ) -> None:
        detail = f"telegram {failure_class}: {description}" if description else failure_class
        if retry_after is not None:
            detail = f"{detail} (retry after {retry_after:g} s)"
        super().__init__(detail)
        self.failure_class = failure_class
        self.retry_after = retry_after
        self.description = description
        self.status_code = status_code
        self.sent_message_ids: tuple[int, ...] = tuple(sent_message_ids)
        self.maybe_sent = maybe_sent

    @property
    def retryable(self) -> bool:
        return self.failure_class.retryable

    def __repr__(self) -> str:
        return (
            f"TelegramSendError({self.failure_class.value!r}, retry_after={self.retry_after!r}, "
            f"description={self.description!r}, status_code={self.status_code!r}, "
            f"maybe_sent={self.maybe_sent!r})"
        )


@dataclass(frozen=True)
class BotIdentity:
    id: int
    username: str
    first_name: str


# --- splitting ----------------------------------------------------------------------------


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units, the unit of Telegram's message limit."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def split_text(text: str, limit: int = MAX_MESSAGE_UTF16) -> list[str]:
    """Cut `text` into chunks of at most `limit` UTF-16 units, in order.

    A text that fits is returned unchanged. Otherwise each cut goes at the last newline in the
    second half of the window, else the last space there (the separator is dropped), else as
    late as possible without separating a character from its combining marks, emoji modifiers
    or ZWJ partners (never inside a surrogate pair: Python strings hold whole code points).
    Chunks that are only whitespace are left out, because Telegram refuses them.
    """
    if limit < 2:
        raise ValueError("limit must be at least 2 UTF-16 units")
    chunks: list[str] = []
    rest = text
    while utf16_len(rest) > limit:
        end, resume = _split_point(rest, _fitting_prefix(rest, limit))
        chunks.append(rest[:end])
        rest = rest[resume:]
    chunks.append(rest)
    return [chunk for chunk in chunks if chunk.strip()]


def _fitting_prefix(text: str, limit: int) -> int:
    """How many leading code points of `text` fit into `limit` UTF-16 units."""
    units = 0
    for index, char in enumerate(text):
        units += 2 if ord(char) > 0xFFFF else 1
        if units > limit:
            return index
    return len(text)


def _split_point(text: str, end: int) -> tuple[int, int]:
    """(end of this chunk, start of the next) for a text longer than its first `end` chars."""
    floor = end // 2
    for separator in ("\n", " "):
        # A separator just past the window can go too: it is dropped, not sent.
        at = text.rfind(separator, floor, end + 1)
        if at > 0:
            return at, at + 1
    at = end
    while at > floor and _holds_together(text, at):
        at -= 1
    return (end, end) if at == floor else (at, at)


def _holds_together(text: str, at: int) -> bool:
    """Whether text[at - 1] and text[at] belong to one visible character."""
    before, after = ord(text[at - 1]), ord(text[at])
    if after == 0x200D or before == 0x200D:  # zero-width joiner sequences
        return True
    if unicodedata.combining(text[at]) or 0xFE00 <= after <= 0xFE0F or 0xE0100 <= after <= 0xE01EF:
        return True
    if 0x1F3FB <= after <= 0x1F3FF or 0xE0020 <= after <= 0xE007F:  # skin tones, flag tags
        return True
    if _is_regional_indicator(before) and _is_regional_indicator(after):
        run = 0
        while at - 1 - run >= 0 and _is_regional_indicator(ord(text[at - 1 - run])):
            run += 1
        return run % 2 == 1  # flags are pairs of regional indicators
    return False


def _is_regional_indicator(code_point: int) -> bool:
    return 0x1F1E6 <= code_point <= 0x1F1FF


# --- classification -----------------------------------------------------------------------

_NOT_FOUND = re.compile(r"chat not found|user not found|peer_id_invalid", re.IGNORECASE)


def classify(status: int, description: str, retry_after: float | None = None) -> FailureClass:
    """Map a Bot API error answer to its failure class (SPEC C.5, D.1).

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


class _ErrorAnswer(TelegramError):
    """A non-2xx Bot API answer, raised before PTB folds the status code into its own classes."""

    def __init__(
        self, status: int, description: str, retry_after: float | None, *, maybe_sent: bool = False
    ) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.retry_after = retry_after
        self.maybe_sent = maybe_sent


class _UnreadableAnswer(TelegramError):
    """A 2xx answer that is not `{"ok": true, "result": ...}`: the call may have acted or not."""

    def __init__(self, status: int) -> None:
        super().__init__(f"unreadable answer (HTTP {status})")
        self.status = status


# A proxy's "the upstream failed / did not answer in time" page: it may have forwarded the call.
_MAYBE_FORWARDED = (HTTPStatus.BAD_GATEWAY, HTTPStatus.GATEWAY_TIMEOUT)


def _error_answer(status: int, payload: bytes) -> _ErrorAnswer:
    try:
        body = json.loads(payload)
    except ValueError:
        body = None
    if not isinstance(body, dict):  # e.g. an HTML page from a proxy in front of the Bot API
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = f"HTTP {status}"
        return _ErrorAnswer(status, phrase, None, maybe_sent=status in _MAYBE_FORWARDED)
    description = str(body.get("description") or f"HTTP {status}")
    parameters = body.get("parameters")
    raw_retry = parameters.get("retry_after") if isinstance(parameters, dict) else None
    retry_after = float(raw_retry) if isinstance(raw_retry, int | float) else None
    return _ErrorAnswer(status, description, retry_after)


def _ok_result(status: int, payload: bytes) -> object:
    """The `result` of a 2xx `{"ok": true, ...}` answer, else `_UnreadableAnswer`."""
    try:
        body = json.loads(payload)
    except ValueError:  # not JSON, or not UTF-8
        body = None
    if not isinstance(body, dict) or body.get("ok") is not True or "result" not in body:
        raise _UnreadableAnswer(status)
    return body["result"]


@dataclass
class _Exchange:
    """What the transport saw of one Bot API call (`_EXCHANGE` holds the current call's)."""

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
_EXCHANGE: contextvars.ContextVar[_Exchange | None] = contextvars.ContextVar(
    "messageweave_telegram_exchange", default=None
)


async def _trace_exchange(request: httpx.Request) -> None:
    """httpx request hook: let the current call's exchange watch the request being written."""
    exchange = _EXCHANGE.get()
    if exchange is not None:
        request.extensions["trace"] = exchange.trace


class _Request(HTTPXRequest):
    """HTTPXRequest that raises `_ErrorAnswer` (with the HTTP status) for every non-2xx answer
    and `_UnreadableAnswer` for a 2xx that is not `ok: true`, and records the raw `result`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs, httpx_kwargs={"event_hooks": {"request": [_trace_exchange]}})

    async def do_request(self, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
        status, payload = await super().do_request(*args, **kwargs)
        if not 200 <= status <= 299:
            raise _error_answer(status, payload)
        result = _ok_result(status, payload)
        exchange = _EXCHANGE.get()
        if exchange is not None:
            exchange.answered, exchange.result = True, result
        return status, payload


# --- keeping the token out of logs --------------------------------------------------------

# Loggers that see request URLs (httpx, httpcore) or the API URL and call data (PTB).
_GUARDED_LOGGERS = (
    "httpx",
    "httpcore.connection",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.proxy",
    "httpcore.socks",
    "telegram",
    "telegram.Bot",
    "telegram.request.BaseRequest",
    "telegram.request.HTTPXRequest",
)
_PTB_CALL_LOGGER = "telegram.Bot"
_REDACTED = "<redacted>"


class _TokenRedactor(logging.Filter):
    """Removes registered bot tokens from log records; drops PTB's DEBUG call log."""

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
        # PTB's DEBUG lines print the API URL (with the token) and every call's text and result.
        if record.name == _PTB_CALL_LOGGER and record.levelno <= logging.DEBUG:
            return False
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


_REDACTOR = _TokenRedactor()


# --- the client ---------------------------------------------------------------------------


class TelegramClient:
    """One bot's outbound Bot API calls. Each call is bounded by `timeout_s` in total."""

    def __init__(
        self,
        token: str,
        api_base_url: str = DEFAULT_API_BASE_URL,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if not token.strip():
            raise ValueError("telegram bot token is empty")
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        _REDACTOR.register(token)  # before Bot(): its constructor logs the URL with the token
        self._api_base_url = api_base_url.rstrip("/")
        self._timeout_s = timeout_s
        self._request = _Request(
            connection_pool_size=_CONNECTION_POOL_SIZE,
            connect_timeout=timeout_s,
            read_timeout=timeout_s,
            write_timeout=timeout_s,
            pool_timeout=timeout_s,
        )
        # One request object for both slots: we never poll, and aclose() closes it.
        self._bot = Bot(
            token,
            base_url=f"{self._api_base_url}/bot",
            request=self._request,
            get_updates_request=self._request,
        )

    def __repr__(self) -> str:
        return f"TelegramClient(api_base_url={self._api_base_url!r}, timeout_s={self._timeout_s})"

    async def __aenter__(self) -> TelegramClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._request.shutdown()

    async def send_text(
        self,
        chat_id: int | str,
        text: str,
        *,
        start_chunk: int = 0,
        disable_link_preview: bool = True,
    ) -> list[int]:
        """Send `text` as plain text, split to Telegram's limit; return the message ids.

        Chunks go out one after the other; the first failure stops the rest and is raised with
        the ids sent so far. `start_chunk` skips chunks already delivered by an earlier attempt.
        One id per chunk sent, taken from Telegram's raw answer: an `ok: true` answer is a
        delivery even when PTB cannot build its `Message` from it, and one without a readable
        `message_id` counts as `UNKNOWN_MESSAGE_ID` (0).
        """
        chunks = split_text(text)
        if not chunks:
            raise TelegramSendError(FailureClass.INVALID_PAYLOAD, None, "message text is empty")
        preview = LinkPreviewOptions(is_disabled=True) if disable_link_preview else None
        sent: list[int] = []
        for chunk in chunks[start_chunk:]:
            try:
                sent.append(await self._send_chunk(chat_id, chunk, preview))
            except TelegramSendError as exc:
                exc.sent_message_ids = tuple(sent)
                raise
        return sent

    async def _send_chunk(
        self, chat_id: int | str, chunk: str, preview: LinkPreviewOptions | None
    ) -> int:
        exchange = _Exchange()
        try:
            await self._call(
                self._bot.send_message(chat_id=chat_id, text=chunk, link_preview_options=preview),
                exchange=exchange,
            )
        except TelegramSendError:
            if not exchange.answered:
                raise
            # Telegram said ok: the user has the message, whatever PTB made of the answer.
            log.warning(
                "sendMessage answered ok but its result is not a valid Message; counted as "
                "delivered (message id %s)",
                exchange.message_id,
            )
        return exchange.message_id

    async def get_me(self, timeout_s: float = PROBE_TIMEOUT_S) -> BotIdentity:
        """Readiness probe: who the token belongs to, answered within `timeout_s`."""
        user = await self._call(
            self._bot.get_me(
                read_timeout=timeout_s,
                write_timeout=timeout_s,
                connect_timeout=timeout_s,
                pool_timeout=timeout_s,
            ),
            timeout_s,
        )
        return BotIdentity(id=user.id, username=user.username or "", first_name=user.first_name)

    async def set_webhook(
        self,
        url: str,
        secret_token: str,
        allowed_updates: Sequence[str] = ("message",),
    ) -> None:
        await self._call(
            self._bot.set_webhook(
                url=url, secret_token=secret_token, allowed_updates=list(allowed_updates)
            )
        )

    async def get_webhook_info(self) -> str:
        """The webhook URL Telegram has on file ('' when none is set)."""
        info = await self._call(self._bot.get_webhook_info())
        return info.url

    async def set_my_commands(self, commands: Sequence[tuple[str, str]]) -> None:
        """Publish the command menu: (command without slash, description) pairs."""
        await self._call(
            self._bot.set_my_commands([BotCommand(name, text) for name, text in commands])
        )

    async def _call(
        self,
        call: Awaitable[T],
        timeout_s: float | None = None,
        *,
        exchange: _Exchange | None = None,
    ) -> T:
        exchange = _Exchange() if exchange is None else exchange
        context = _EXCHANGE.set(exchange)
        try:
            async with asyncio.timeout(self._timeout_s if timeout_s is None else timeout_s):
                return await call
        except Exception as exc:
            # `from None`: the original exception may quote the request URL, token included.
            raise _send_error(exc, exchange) from None
        finally:
            _EXCHANGE.reset(context)


def _send_error(exc: Exception, exchange: _Exchange) -> TelegramSendError:
    if isinstance(exc, _ErrorAnswer):
        description = _REDACTOR.redact(exc.description)[:_MAX_DESCRIPTION]
        failure_class = classify(exc.status, description, exc.retry_after)
        return TelegramSendError(
            failure_class,
            exc.retry_after,
            description,
            status_code=exc.status,
            maybe_sent=exc.maybe_sent,
        )
    if isinstance(exc, _UnreadableAnswer):
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
    description = _REDACTOR.redact(f"{type(exc).__name__}: {exc}")[:_MAX_DESCRIPTION]
    if isinstance(exc, NetworkError):
        # PTB wraps every transport failure (and anything else do_request raises) in
        # NetworkError/TimedOut; whether the request had gone out is what the exchange saw.
        return TelegramSendError(FailureClass.TRANSIENT, None, description, maybe_sent=written)
    # PTB refusing a call before sending it, or failing on an answer it got (for an ok answer
    # to sendMessage, `_send_chunk` counts the delivery instead).
    return TelegramSendError(FailureClass.UNKNOWN, None, description)
