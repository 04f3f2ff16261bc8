"""Structured logs: one JSON object per line, every configured secret removed.

`configure_logging()` (called by `messageweave run` / `serve`) puts one handler on the root
logger; uvicorn's own loggers propagate to it. Each line is
`{"time","level","logger","message",...}` plus the request id of the request being served and
any `extra={"fields": {...}}` the call site gave. `RequestLog` writes one line per request:
`{"event":"request","request_id","method","path","status","duration_ms"}` (the path only,
never the query string: `/debug/notify?text=` carries message text); status 499 when the client
went away before its response was complete.

Redaction happens on the way out, for every record of every logger: `scheme://user:pass@`
becomes `scheme://<credentials>@`, `/bot<token>` paths lose the token, and every value
returned by a registered secret source (the admin key, the debug token, the Redis password,
each secret of the live business configuration) becomes `<secret>`.

Redaction runs on every line, so its cost is kept out of the common case without changing
its result: the secret set is read once per record (`RedactionFilter` hands it to
`JsonFormatter`), what `scrub` needs for one set is built once (`_scrubber`), and each rewrite
is skipped when the text lacks the literal its pattern cannot match without.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import sys
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from functools import lru_cache
from typing import IO, Any
from urllib.parse import urlsplit

from starlette.requests import ClientDisconnect
from starlette.types import Message, Receive, Scope, Send

from messageweave.errors import HttpMiddleware, request_id_of

_URL_CREDENTIALS = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")
_BOT_PATH = re.compile(r"/bot[^/\s]+")
# A secret is replaced only as a whole value: never inside a longer name made of these.
_NAME_CHAR = r"[A-Za-z0-9_\-]"
MIN_SECRET_LEN = 4  # shorter values would turn ordinary words and addresses into "<secret>"


def scrub(text: str, secrets: Iterable[str | None]) -> str:
    """Remove `scheme://user:pass@`, Telegram `/bot<token>` paths and every known secret."""
    return _scrubber(tuple(secrets)).scrub(text)


class _Scrubber:
    """`scrub` for one tuple of secrets: the secrets kept (in the order given, which
    `current_secrets` makes longest first) and their compiled patterns, built once."""

    __slots__ = ("patterns",)

    def __init__(self, secrets: tuple[str | None, ...]) -> None:
        self.patterns = tuple((secret, _whole_value(secret)) for secret in secrets
                              if secret and len(secret.strip()) >= MIN_SECRET_LEN)

    def scrub(self, text: str) -> str:
        # Each `in` test skips a rewrite that cannot change the text: every pattern matches
        # only where its literal (`://`, `/bot`, the secret itself) occurs in the text as it
        # stands at that step, so the result is the same as running every rewrite in turn.
        if "://" in text:
            text = _URL_CREDENTIALS.sub(r"\1<credentials>@", text)
        if "/bot" in text:
            text = _BOT_PATH.sub("/bot<token>", text)
        for secret, pattern in self.patterns:
            if secret in text:
                text = pattern.sub("<secret>", text)
        return text


@lru_cache(maxsize=32)  # a few live sets at a time (logs, audit records, a warning's config)
def _scrubber(secrets: tuple[str | None, ...]) -> _Scrubber:
    return _Scrubber(secrets)


@lru_cache(maxsize=256)
def _whole_value(secret: str) -> re.Pattern[str]:
    """`secret` where it stands on its own: not preceded or followed by a name character (so a
    secret `mail` never rewrites `mailhost`, nor `7` the `127` of `127.0.0.1`)."""
    return re.compile(rf"(?<!{_NAME_CHAR}){re.escape(secret)}(?!{_NAME_CHAR})")


SecretSource = Callable[[], Iterable[str | None]]

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "request_id", default=None
)
_sources: list[SecretSource] = []


def add_secret_source(source: SecretSource) -> None:
    """Register a callable whose values are removed from every log line from now on."""
    _sources.append(source)


def remove_secret_source(source: SecretSource) -> None:
    if source in _sources:
        _sources.remove(source)


def current_secrets() -> tuple[str, ...]:
    """Every registered source's values in every form they take in a log line, longest first.
    The sources are asked each time (a reload changes them); the expansion is cached."""
    found: list[str | None] = []
    for source in list(_sources):
        try:
            found.extend(list(source()))
        except Exception:  # nosec B112 # a broken source must never stop logging
            continue
    return _expanded(tuple(found))


@lru_cache(maxsize=32)
def _expanded(found: tuple[str | None, ...]) -> tuple[str, ...]:
    values: set[str] = set()
    for value in found:
        if value and len(value.strip()) >= MIN_SECRET_LEN:
            values.add(value)
            # as it appears inside a JSON line (`fields` are redacted after json.dumps)
            values.add(json.dumps(value, ensure_ascii=False)[1:-1])
            values.add(json.dumps(value)[1:-1])
    return tuple(sorted(values, key=len, reverse=True))  # longest first: a token before its parts


def _current_scrubber() -> _Scrubber:
    return _scrubber(current_secrets())


def redact(text: str) -> str:
    return _current_scrubber().scrub(text)


def redis_url_password(url: str) -> str | None:
    try:
        return urlsplit(url).password
    except ValueError:
        return None


# The record attribute through which `RedactionFilter` hands its scrubber to `JsonFormatter`.
_SCRUBBER_ATTR = "_messageweave_scrubber"


class RedactionFilter(logging.Filter):
    """Rewrites a record's message and exception text with every secret removed."""

    def filter(self, record: logging.LogRecord) -> bool:
        scrubber = _current_scrubber()
        try:
            message = record.getMessage()
        except Exception:
            message = str(record.msg)
        record.msg, record.args = scrubber.scrub(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        record.exc_info = None  # the traceback is kept only as the redacted text
        if record.exc_text:
            record.exc_text = scrubber.scrub(record.exc_text)
        record.__dict__[_SCRUBBER_ATTR] = scrubber
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        # The filter's set, read an instant ago for this record, once: a formatter used without
        # the filter, or a second handler's, reads the set in force itself.
        scrubber = record.__dict__.pop(_SCRUBBER_ATTR, None)
        if not isinstance(scrubber, _Scrubber):
            scrubber = _current_scrubber()
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        rid = request_id_var.get()
        if rid is not None:
            line["request_id"] = rid
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update(fields)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exception"] = record.exc_text
        # A second pass over the finished line: `fields` are redacted too.
        return scrubber.scrub(json.dumps(line, ensure_ascii=False, default=str))


def configure_logging(stream: IO[str] | None = None, level: int = logging.INFO) -> logging.Handler:
    """One JSON handler with the redaction filter on the root logger (replacing any other)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RedactionFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
    return handler


_request_log = logging.getLogger("messageweave.request")


CLIENT_CLOSED = 499  # nginx's code: the client went away before the response was complete


class RequestLog(HttpMiddleware):
    """ASGI middleware: binds the request id for the duration of a request, then logs it.

    A client that goes away before its response is complete (an `http.disconnect` from
    `receive`, which Starlette turns into `ClientDisconnect` while reading the body) is logged
    as 499 at INFO: nothing failed on our side, and there is nobody left to answer. The
    `ClientDisconnect` stops here, before the last-resort handler would log it as an error."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        rid = request_id_of(scope)
        token = request_id_var.set(rid)
        started = time.perf_counter()
        status = 500
        complete = disconnected = False

        async def watch_receive() -> Message:
            nonlocal disconnected
            message = await receive()
            if message["type"] == "http.disconnect":
                disconnected = True
            return message

        async def send_status(message: Message) -> None:
            nonlocal status, complete
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                complete = not disconnected  # an answer after the disconnect reaches nobody
            await send(message)

        try:
            await self.app(scope, watch_receive, send_status)
        except ClientDisconnect:
            disconnected = True
        finally:
            if disconnected and not complete:
                status = CLIENT_CLOSED
            if _request_log.isEnabledFor(logging.INFO):
                # One line per request: the message and fields built once, no %-formatting.
                method, path = scope["method"], scope["path"]
                _request_log.info(
                    f"{method} {path} {status}",
                    extra={"fields": {
                        "event": "request", "method": method, "path": path, "status": status,
                        "duration_ms": round((time.perf_counter() - started) * 1000, 2),
                    }},
                )
            request_id_var.reset(token)
