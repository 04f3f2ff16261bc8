"""`TelegramClient`: one bot's outbound Bot API calls, each bounded in time, each failure
turned into a `TelegramSendError`. Every method goes down one path, `call`, on httpx, and every
failure through one map (`_failure`, `_answer`), as httpx's own client sends every request."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import httpx

from messageweave.aio import AsyncClosing
from messageweave.chat.telegram.errors import FailureClass, TelegramSendError, classify
from messageweave.chat.telegram.redaction import REDACTOR
from messageweave.chat.telegram.split import split_text
from messageweave.chat.telegram.transport import (
    PLAIN,
    Exchange,
    Keyboard,
    NotOk,
    SendOptions,
    error_fields,
    markup,
    message_id_of,
    ok_result,
)
from messageweave.logs import transport_kind

DEFAULT_API_BASE_URL = "https://api.telegram.org"
DEFAULT_TIMEOUT_S = 10.0
PROBE_TIMEOUT_S = 3.0
_CONNECTION_POOL_SIZE = 8
_MAX_DESCRIPTION = 300
_POLL = "getUpdates"  # the one method on the poller's own connection

# One file of a multipart call: (file name, content, media type).
Upload = tuple[str, bytes, str]

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
        REDACTOR.register(token)  # before any call: httpx logs each request URL at INFO
        self._token = token
        self._api_base_url = api_base_url.rstrip("/")
        self._timeout_s = timeout_s
        self._poll_http: httpx.AsyncClient | None = None  # getUpdates' (`_pool`)
        self._http: httpx.AsyncClient | None = None  # every other call's (`_pool`)
        self._trust: ssl.SSLContext | None = None  # shared by both
        self._closed = False
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"TelegramClient(api_base_url={self._api_base_url!r}, timeout_s={self._timeout_s})"

    async def aclose(self) -> None:
        with self._lock:
            self._closed = True
            pools = [c for c in (self._poll_http, self._http) if c is not None]
        for http in pools:
            await http.aclose()

    def _pool(self, polls: bool) -> httpx.AsyncClient:
        """The poller's client (one connection: its calls are one at a time), or the one every
        other call shares (`_CONNECTION_POOL_SIZE`): a long poll never holds a send's
        connection. Built on first use, under the lock (concurrent first calls, from any
        thread, share one). Both trust the system's store (OpenSSL's default paths,
        SSL_CERT_FILE / SSL_CERT_DIR included) through one context: not certifi's whole
        bundle (about 1 MB)."""
        with self._lock:
            if self._closed:
                # Like a call on a closed connection pool: nothing was sent.
                raise TelegramSendError(FailureClass.TRANSIENT, None, "the client is closed")
            http = self._poll_http if polls else self._http
            if http is None:
                if self._trust is None:
                    self._trust = ssl.create_default_context()
                size = 1 if polls else _CONNECTION_POOL_SIZE
                http = httpx.AsyncClient(
                    limits=httpx.Limits(max_connections=size, max_keepalive_connections=size),
                    follow_redirects=False, trust_env=False, verify=self._trust)
                if polls:
                    self._poll_http = http
                else:
                    self._http = http
            return http

    async def call(self, method: str, params: Mapping[str, object] | None = None,
                   files: Mapping[str, Upload] | None = None, *,
                   timeout_s: float | None = None) -> object:
        """One Bot API call: `params` form-encoded (strings as they are, anything else as
        JSON), multipart with `files`; the `result` of Telegram's `ok: true` answer. Bounded
        by `timeout_s` (the client's own when None) in total. Every failure is a
        `TelegramSendError` (`_failure`, `_answer`), `maybe_sent` exactly when the whole
        request was written and no readable answer came back."""
        timeout = self._timeout_s if timeout_s is None else timeout_s
        http = self._pool(polls=method == _POLL)
        exchange = Exchange()
        try:
            async with asyncio.timeout(timeout):
                response = await http.post(
                    f"{self._api_base_url}/bot{self._token}/{method}",
                    data=_form(params or {}), files=files, timeout=timeout,
                    extensions={"trace": exchange.trace})
        except (TimeoutError, httpx.TimeoutException, httpx.HTTPError, httpx.InvalidURL) as exc:
            # `from None`: the original exception may quote the request URL, token included.
            raise _failure(method, exc, exchange.written) from None
        return _answer(response)

    # --- messages ---------------------------------------------------------------------------

    async def send_text(
        self,
        chat_id: int | str,
        text: str,
        *,
        disable_link_preview: bool = True,
        options: SendOptions = PLAIN,
    ) -> list[int]:
        """Send `text` as plain text, split to Telegram's limit; return the message ids.

        Chunks go out one after the other; the first failure stops the rest. (The pipeline
        sends one chunk per call, each behind the ledger's fence, and resumes a message from
        the chunk its `SendProgress` names.) One id per chunk sent, `UNKNOWN_MESSAGE_ID` (0)
        for an `ok: true` answer without a readable `message_id`. Every chunk goes to
        `options`' topic with its `silent`; only the last carries the keyboard.
        """
        chunks = split_text(text)
        if not chunks:
            raise TelegramSendError(FailureClass.INVALID_PAYLOAD, None, "message text is empty")
        last = len(chunks) - 1
        bare = SendOptions(options.thread_id, options.silent)
        return [await self._send_chunk(chat_id, chunk, disable_link_preview,
                                       options if number == last else bare)
                for number, chunk in enumerate(chunks)]

    async def _send_chunk(self, chat_id: int | str, chunk: str, disable_link_preview: bool,
                          options: SendOptions) -> int:
        params: dict[str, object] = {"chat_id": chat_id, "text": chunk}
        if disable_link_preview:
            params["link_preview_options"] = {"is_disabled": True}
        if options.thread_id is not None:
            params["message_thread_id"] = options.thread_id
        if options.silent:
            params["disable_notification"] = True
        if options.keyboard:
            params["reply_markup"] = markup(options.keyboard)
        return message_id_of(await self.call("sendMessage", params))

    async def send_file(
        self, chat_id: int | str, content: bytes, filename: str, media_type: str, *,
        photo: bool = False, thread_id: int | None = None, timeout_s: float | None = None,
    ) -> int:
        """Upload `content` as a photo (sendPhoto) or a document (sendDocument), multipart,
        with the mail's MIME type on the part (Telegram's own detection is off for a
        document); the message id (`UNKNOWN_MESSAGE_ID` when Telegram's ok answer names
        none). `timeout_s` bounds the whole call (an upload of tens of MB outlasts the client's
        own timeout)."""
        params: dict[str, object] = {"chat_id": chat_id}
        if thread_id is not None:
            params["message_thread_id"] = thread_id
        field = "photo" if photo else "document"
        if not photo:
            params["disable_content_type_detection"] = True
        result = await self.call("sendPhoto" if photo else "sendDocument", params,
                                 {field: (filename, content, media_type)}, timeout_s=timeout_s)
        return message_id_of(result)

    async def connect(self) -> None:
        """Open the connection sendMessage will use (a getMe: it shares the pool), so the first
        message after the start does not wait for it (TCP, TLS); best effort: a failure is
        the first message's to meet."""
        try:
            await self.get_me()
        except TelegramSendError as exc:
            log.info("the Telegram connection was not opened at start-up: %s",
                     exc.description)

    # --- a button press ---------------------------------------------------------------------

    async def answer_callback_query(self, callback_query_id: str, text: str | None = None) -> None:
        """Answer a button press (Telegram shows `text` as a short notice; the spinner stops)."""
        params: dict[str, object] = {"callback_query_id": callback_query_id}
        if text is not None:
            params["text"] = text
        await self.call("answerCallbackQuery", params)

    async def edit_message_reply_markup(
        self, chat_id: int | str, message_id: int, keyboard: Keyboard | None
    ) -> None:
        """Replace the inline keyboard under a message the bot sent (None removes it)."""
        params: dict[str, object] = {"chat_id": chat_id, "message_id": message_id}
        keys = markup(keyboard)
        if keys is not None:
            params["reply_markup"] = keys
        await self.call("editMessageReplyMarkup", params)

    # --- the bot, its webhook and its updates -----------------------------------------------

    async def get_me(self, timeout_s: float = PROBE_TIMEOUT_S) -> BotIdentity:
        """Readiness probe: who the token belongs to, answered within `timeout_s`."""
        user = await self.call("getMe", timeout_s=timeout_s)
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
        await self.call("setWebhook", {"url": url, "secret_token": secret_token,
                                       "allowed_updates": list(allowed_updates)})

    async def webhook_url(self) -> str:
        """The webhook URL Telegram has on file ('' when none is set): getWebhookInfo."""
        result = await self.call("getWebhookInfo")
        url = result.get("url") if isinstance(result, dict) else None
        return url if isinstance(url, str) else ""

    async def delete_webhook(self) -> None:
        """Remove the webhook (its pending updates stay, for getUpdates)."""
        await self.call("deleteWebhook", {"drop_pending_updates": False})

    async def set_my_commands(self, commands: Sequence[tuple[str, str]]) -> None:
        """Publish the command menu: (command without slash, description) pairs."""
        await self.call("setMyCommands", {"commands": [
            {"command": name, "description": text} for name, text in commands]})

    async def get_updates(
        self, offset: int | None, *, timeout_s: int, limit: int = 100,
        allowed_updates: Sequence[str] = ("message", "callback_query"),
    ) -> list[object]:
        """One long poll (`getUpdates`, on the poller's own connection): the raw updates
        Telegram answered with, oldest first (an update is answered again until a call's
        `offset` is above its `update_id`). The call waits up to `timeout_s` for one; the
        whole call is bounded by that plus this client's own timeout."""
        params: dict[str, object] = {"timeout": timeout_s, "limit": limit,
                                     "allowed_updates": list(allowed_updates)}
        if offset is not None:
            params["offset"] = offset
        result = await self.call(_POLL, params, timeout_s=timeout_s + self._timeout_s)
        return list(result) if isinstance(result, list) else []


def _form(params: Mapping[str, object]) -> dict[str, str]:
    """Bot API parameters as a form: strings as they are, every other value (numbers,
    booleans, objects) as JSON."""
    return {name: value if isinstance(value, str) else json.dumps(value)
            for name, value in params.items()}


def _failure(method: str, exc: Exception, written: bool) -> TelegramSendError:
    """A call that got no answer: `transient`, `maybe_sent` when the request had been written,
    and why it got none (`unreached`)."""
    if isinstance(exc, httpx.InvalidURL):  # its text would hold the token
        return TelegramSendError(FailureClass.TRANSIENT, None,
                                 f"{method}: the bot token cannot be sent in a URL",
                                 unreached="bad_url")
    unreached = transport_kind(exc)
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        when = "after" if written else "before"
        return TelegramSendError(FailureClass.TRANSIENT, None,
                                 f"{method} timed out {when} the request was sent",
                                 maybe_sent=written, unreached=unreached)
    description = REDACTOR.redact(f"{type(exc).__name__}: {exc}")[:_MAX_DESCRIPTION]
    return TelegramSendError(FailureClass.TRANSIENT, None, description, maybe_sent=written,
                             unreached=unreached)


def _answer(response: httpx.Response) -> object:
    """The `result` of an `ok: true` answer; any other answer as its `TelegramSendError`."""
    status = response.status_code
    if not response.is_success:
        fields = error_fields(status, response.content)
        description = REDACTOR.redact(fields.description)[:_MAX_DESCRIPTION]
        raise TelegramSendError(classify(status, description, fields.retry_after),
                                fields.retry_after, description, status_code=status,
                                maybe_sent=fields.maybe_sent)
    try:
        return ok_result(response.content)
    except NotOk:
        raise TelegramSendError(FailureClass.TRANSIENT, None, f"unreadable answer (HTTP {status})",
                                status_code=status, maybe_sent=True) from None
