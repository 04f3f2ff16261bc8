"""`TelegramClient`: one bot's outbound Bot API calls, each bounded in time, each failure
turned into a `TelegramSendError`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from telegram import Bot, BotCommand, LinkPreviewOptions
from telegram.error import NetworkError

from messageweave.aio import AsyncClosing
from messageweave.chat.telegram.errors import FailureClass, TelegramSendError, classify
from messageweave.chat.telegram.redaction import REDACTOR
from messageweave.chat.telegram.split import split_text
from messageweave.chat.telegram.transport import (
    EXCHANGE,
    BotApiRequest,
    ErrorAnswer,
    Exchange,
    UnreadableAnswer,
)

DEFAULT_API_BASE_URL = "https://api.telegram.org"
DEFAULT_TIMEOUT_S = 10.0
PROBE_TIMEOUT_S = 3.0
_CONNECTION_POOL_SIZE = 8
_MAX_DESCRIPTION = 300

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BotIdentity:
    id: int
    username: str
    first_name: str


class TelegramClient(AsyncClosing):
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
        REDACTOR.register(token)  # before Bot(): its constructor logs the URL with the token
        self._api_base_url = api_base_url.rstrip("/")
        self._timeout_s = timeout_s
        self._request = BotApiRequest(
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
        exchange = Exchange()
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
        exchange: Exchange | None = None,
    ) -> T:
        exchange = Exchange() if exchange is None else exchange
        context = EXCHANGE.set(exchange)
        try:
            async with asyncio.timeout(self._timeout_s if timeout_s is None else timeout_s):
                return await call
        except Exception as exc:
            # `from None`: the original exception may quote the request URL, token included.
            raise _send_error(exc, exchange) from None
        finally:
            EXCHANGE.reset(context)


def _send_error(exc: Exception, exchange: Exchange) -> TelegramSendError:
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
    # PTB refusing a call before sending it, or failing on an answer it got (for an ok answer
    # to sendMessage, `_send_chunk` counts the delivery instead).
    return TelegramSendError(FailureClass.UNKNOWN, None, description)
