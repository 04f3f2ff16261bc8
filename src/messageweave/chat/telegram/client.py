"""`TelegramClient`: one bot's outbound Bot API calls, each bounded in time, each failure
turned into a `TelegramSendError`."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import httpx

from messageweave.aio import AsyncClosing
from messageweave.chat.telegram.errors import FailureClass, TelegramSendError, classify
from messageweave.chat.telegram.redaction import REDACTOR
from messageweave.chat.telegram.split import split_text
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

if TYPE_CHECKING:
    from messageweave.chat.telegram.ptb import PtbBot

DEFAULT_API_BASE_URL = "https://api.telegram.org"
DEFAULT_TIMEOUT_S = 10.0
PROBE_TIMEOUT_S = 3.0
_CONNECTION_POOL_SIZE = 8

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
        self._token = token
        self._api_base_url = api_base_url.rstrip("/")
        self._timeout_s = timeout_s
        self._ptb: PtbBot | None = None  # built by the first call (`_bot`)
        self._poll_http: httpx.AsyncClient | None = None  # the poller's (`_bare_http`)
        self._send_http: httpx.AsyncClient | None = None  # sendMessage's (`_bare_http`)
        self._trust: ssl.SSLContext | None = None  # shared by both
        self._closed = False
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"TelegramClient(api_base_url={self._api_base_url!r}, timeout_s={self._timeout_s})"

    async def aclose(self) -> None:
        with self._lock:
            self._closed, ptb = True, self._ptb
            bare = [c for c in (self._poll_http, self._send_http) if c is not None]
        if ptb is not None:
            await ptb.shutdown()
        for http in bare:
            await http.aclose()

    def _bot(self) -> PtbBot:
        """The bot, built on the first call: python-telegram-bot is imported only then, so a
        configuration that never calls Telegram (an idle service) does not pay its memory.
        Under the lock, so concurrent first calls (from any thread) share one bot."""
        with self._lock:
            if self._ptb is None:
                if self._closed:
                    # Like a call on a closed connection pool: nothing was sent.
                    raise TelegramSendError(FailureClass.TRANSIENT, None, "the client is closed")
                from messageweave.chat.telegram.ptb import PtbBot

                self._ptb = PtbBot(
                    self._token, f"{self._api_base_url}/bot", self._timeout_s,
                    _CONNECTION_POOL_SIZE,
                )
            return self._ptb

    async def send_text(
        self,
        chat_id: int | str,
        text: str,
        *,
        start_chunk: int = 0,
        disable_link_preview: bool = True,
        options: SendOptions = PLAIN,
    ) -> list[int]:
        """Send `text` as plain text, split to Telegram's limit; return the message ids.

        Chunks go out one after the other; the first failure stops the rest and is raised with
        the ids sent so far. `start_chunk` skips chunks already delivered by an earlier attempt.
        One id per chunk sent, taken from Telegram's raw answer: an `ok: true` answer is a
        delivery even when PTB cannot build its `Message` from it, and one without a readable
        `message_id` counts as `UNKNOWN_MESSAGE_ID` (0). Every chunk goes to `options`' topic
        with its `silent`; only the last carries the keyboard.
        """
        chunks = split_text(text)
        if not chunks:
            raise TelegramSendError(FailureClass.INVALID_PAYLOAD, None, "message text is empty")
        sent: list[int] = []
        last = len(chunks) - 1
        bare = SendOptions(options.thread_id, options.silent)
        for number in range(start_chunk, len(chunks)):
            chunk = chunks[number]
            try:
                sent.append(await self._send_chunk(
                    chat_id, chunk, disable_link_preview, options if number == last else bare))
            except TelegramSendError as exc:
                exc.sent_message_ids = tuple(sent)
                raise
        return sent

    async def _send_chunk(self, chat_id: int | str, chunk: str, disable_link_preview: bool,
                          options: SendOptions = PLAIN) -> int:
        """One sendMessage, bare (issue #26): no python-telegram-bot on the path every message
        takes, so the first one pays neither its import nor its set-up (~130 ms on the dev VM)
        and an instance that only notifies never loads it. The parameters are encoded as PTB
        encodes them (a form, JSON for the structured ones); an `ok: true` answer is a
        delivery whatever its `result` holds (`Exchange.message_id`)."""
        params: dict[str, object] = {"chat_id": chat_id, "text": chunk}
        if disable_link_preview:
            params["link_preview_options"] = {"is_disabled": True}
        if options.thread_id is not None:
            params["message_thread_id"] = options.thread_id
        if options.silent:
            params["disable_notification"] = True
        if options.keyboard:
            params["reply_markup"] = {"inline_keyboard": [
                [{"text": text, "callback_data": data} for text, data in row]
                for row in options.keyboard]}
        exchange = Exchange()
        await self._bare("sendMessage", params, self._timeout_s, exchange)
        return exchange.message_id

    async def connect(self) -> None:
        """Open the connection sendMessage will use (a getMe: it shares the pool), so the first
        message after the start does not wait for it (TCP, TLS); best effort: a failure is
        the first message's to meet."""
        try:
            await self.get_me()
        except TelegramSendError as exc:
            log.info("the Telegram connection was not opened at start-up: %s",
                     exc.description)

    async def send_file(
        self, chat_id: int | str, content: bytes, filename: str, media_type: str, *,
        photo: bool = False, thread_id: int | None = None, timeout_s: float | None = None,
    ) -> int:
        """Upload `content` as a photo (sendPhoto) or a document (sendDocument); the message
        id (`UNKNOWN_MESSAGE_ID` when Telegram's ok answer names none). `timeout_s` bounds the
        whole call (an upload of tens of MB outlasts the client's own timeout)."""
        exchange = Exchange()
        try:
            await self._call(
                lambda bot: bot.send_file(chat_id, content, filename, media_type, photo=photo,
                                          thread_id=thread_id, timeout_s=timeout_s),
                timeout_s, exchange=exchange)
        except TelegramSendError:
            if not exchange.answered:
                raise
            log.warning("a file upload answered ok but its result is not a valid Message")
        return exchange.message_id

    async def answer_callback_query(self, callback_query_id: str, text: str | None = None) -> None:
        """Answer a button press (Telegram shows `text` as a short notice; the spinner stops)."""
        await self._call(lambda bot: bot.answer_callback_query(callback_query_id, text))

    async def edit_message_reply_markup(
        self, chat_id: int | str, message_id: int, keyboard: Keyboard | None
    ) -> None:
        """Replace the inline keyboard under a message the bot sent (None removes it)."""
        await self._call(lambda bot: bot.edit_message_reply_markup(chat_id, message_id, keyboard))

    async def get_me(self, timeout_s: float = PROBE_TIMEOUT_S) -> BotIdentity:
        """Readiness probe: who the token belongs to, answered within `timeout_s`."""
        user = await self._bare("getMe", {}, timeout_s, Exchange())
        if not isinstance(user, dict) or not isinstance(user.get("id"), int):
            raise TelegramSendError(FailureClass.UNKNOWN, None, "getMe answered no user")
        return BotIdentity(id=user["id"], username=str(user.get("username") or ""),
                           first_name=str(user.get("first_name") or ""))

    async def set_webhook(
        self,
        url: str,
        secret_token: str,
        allowed_updates: Sequence[str] = ("message",),
    ) -> None:
        await self._call(lambda bot: bot.set_webhook(url, secret_token, allowed_updates))

    async def get_webhook_info(self) -> str:
        """The webhook URL Telegram has on file ('' when none is set)."""
        info = await self._call(lambda bot: bot.get_webhook_info())
        return info.url

    # --- the poller's calls (issue #22): bare httpx, no python-telegram-bot -----------------
    # An idle instance that only polls never sends: it must not pay PTB's memory for that
    # (docs/benchmarks.md, idle memory). The answers are read by the same rules as the PTB
    # transport's (`transport.error_fields`, `transport.ok_result`, `classify`).

    async def delete_webhook(self) -> None:
        """Remove the webhook (its pending updates stay, for getUpdates)."""
        await self._bare("deleteWebhook", {"drop_pending_updates": False}, self._timeout_s)

    async def webhook_url(self) -> str:
        """The webhook URL Telegram has on file ('' when none is set), without PTB."""
        result = await self._bare("getWebhookInfo", {}, self._timeout_s)
        url = result.get("url") if isinstance(result, dict) else None
        return url if isinstance(url, str) else ""

    async def get_updates(
        self, offset: int | None, *, timeout_s: int, limit: int = 100,
        allowed_updates: Sequence[str] = ("message", "callback_query"),
    ) -> list[object]:
        """One long poll (`getUpdates`): the raw updates Telegram answered with, oldest first
        (an update is answered again until a call's `offset` is above its `update_id`). The
        call waits up to `timeout_s` for one; the whole call is bounded by that plus this
        client's own timeout."""
        params: dict[str, object] = {"timeout": timeout_s, "limit": limit,
                                     "allowed_updates": list(allowed_updates)}
        if offset is not None:
            params["offset"] = offset
        result = await self._bare("getUpdates", params, timeout_s + self._timeout_s)
        return list(result) if isinstance(result, list) else []

    def _bare_http(self, sends: bool = False) -> httpx.AsyncClient:
        """The poller's client (one connection: its calls are one at a time), or with `sends`
        sendMessage's (a pool as large as PTB's): a long poll never holds a send's connection.
        Both trust the system's store (OpenSSL's default paths, SSL_CERT_FILE / SSL_CERT_DIR
        included) through one context: not certifi's whole bundle (about 1 MB)."""
        with self._lock:
            if self._closed:
                raise TelegramSendError(FailureClass.TRANSIENT, None, "the client is closed")
            http = self._send_http if sends else self._poll_http
            if http is None:
                if self._trust is None:
                    self._trust = ssl.create_default_context()
                size = _CONNECTION_POOL_SIZE if sends else 1
                http = httpx.AsyncClient(
                    limits=httpx.Limits(max_connections=size, max_keepalive_connections=size),
                    follow_redirects=False, trust_env=False, verify=self._trust)
                if sends:
                    self._send_http = http
                else:
                    self._poll_http = http
            return http

    async def _bare(self, method: str, params: dict[str, object], timeout_s: float,
                    exchange: Exchange | None = None) -> object:
        """One Bot API call without PTB. With an `exchange` (the sends' pool) the call is
        form-encoded as PTB sends it and its failure says whether the request went out
        (`maybe_sent`, as `PtbBot.failure` does); without, it is the poller's JSON call."""
        url = f"{self._api_base_url}/bot{self._token}/{method}"
        http = self._bare_http(sends=exchange is not None)
        try:
            async with asyncio.timeout(timeout_s):
                if exchange is None:
                    response = await http.post(url, json=params, timeout=timeout_s)
                else:
                    response = await http.post(
                        url, data=_form(params), timeout=timeout_s,
                        extensions={"trace": exchange.trace})
        except (TimeoutError, httpx.TimeoutException):
            if exchange is None:
                raise TelegramSendError(FailureClass.TRANSIENT, None,
                                        f"{method} timed out after {timeout_s:g} s") from None
            when = "after" if exchange.written else "before"
            raise TelegramSendError(FailureClass.TRANSIENT, None,
                                    f"timed out {when} the request was sent",
                                    maybe_sent=exchange.written) from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            description = REDACTOR.redact(f"{type(exc).__name__}: {exc}")[:300]
            raise TelegramSendError(FailureClass.TRANSIENT, None, description,
                                    maybe_sent=exchange is not None and exchange.written
                                    ) from None
        if not response.is_success:
            fields = error_fields(response.status_code, response.content)
            description = REDACTOR.redact(fields.description)[:300]
            raise TelegramSendError(
                classify(response.status_code, description, fields.retry_after),
                fields.retry_after, description, status_code=response.status_code,
                maybe_sent=exchange is not None and fields.maybe_sent)
        try:
            result = ok_result(response.content)
        except NotOk:
            raise TelegramSendError(
                FailureClass.TRANSIENT, None,
                f"unreadable answer (HTTP {response.status_code})",
                status_code=response.status_code, maybe_sent=exchange is not None) from None
        if exchange is not None:
            exchange.answered, exchange.result = True, result
        return result

    async def set_my_commands(self, commands: Sequence[tuple[str, str]]) -> None:
        """Publish the command menu: (command without slash, description) pairs."""
        await self._call(lambda bot: bot.set_my_commands(commands))

    async def _call(
        self,
        call: Callable[[PtbBot], Awaitable[T]],
        timeout_s: float | None = None,
        *,
        exchange: Exchange | None = None,
    ) -> T:
        bot = self._bot()
        pending = call(bot)
        exchange = Exchange() if exchange is None else exchange
        context = EXCHANGE.set(exchange)
        try:
            async with asyncio.timeout(self._timeout_s if timeout_s is None else timeout_s):
                return await pending
        except Exception as exc:
            # `from None`: the original exception may quote the request URL, token included.
            raise bot.failure(exc, exchange) from None
        finally:
            EXCHANGE.reset(context)


def _form(params: dict[str, object]) -> dict[str, str]:
    """Bot API parameters as a form, the way PTB encodes them: strings as they are, every
    other value (numbers, booleans, objects) as JSON."""
    return {name: value if isinstance(value, str) else json.dumps(value)
            for name, value in params.items()}
