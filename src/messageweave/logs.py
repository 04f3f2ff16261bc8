"""Structured logs: one JSON object per line, every configured secret removed.

`configure_logging()` (called by `messageweave run` / `serve`) puts one handler on the root
logger; uvicorn's own loggers propagate to it. Each line is
`{"time","level","logger","message",...}` plus the request id of the request being served and
any `extra={"fields": {...}}` the call site gave. `RequestLog` writes one line per request:
`{"event":"request","request_id","method","path","status","duration_ms"}` (the path only,
never the query string: `/debug/notify?text=` carries message text); status 499 when the client
went away before its response was complete.

Redaction happens on the way out, for every record of every logger: `scheme://user:pass@`
becomes `scheme://<credentials>@` (also with several hosts, `redis+sentinel://:pw@h1,h2/m`),
a `password=` or `…_password=` query field (`?sentinel_password=`) becomes `<secret>`,
`/bot<token>` paths lose the token, and every value
returned by a registered secret source (the admin key, the debug token, the Redis password,
each secret of the live business configuration) becomes `<secret>`.

Only values are redacted, never names: the message and the exception text as a whole, and each
value of `fields` (strings, and the strings inside lists and mappings) on its own; the keys
of `fields` are written as given, so a field `telegram_webhook_secret` keeps its name whatever
the secrets are. A placeholder already in the text is never redacted again (a secret `secret`
does not turn `<secret>` into `<<secret>>`), so redacting twice changes nothing.

A background loop's failure is logged through `RepeatLog`: its class, a redacted one-line
reason and what to check (`failure_text`, the class→remedy table `REMEDIES`), at most once a
minute per place and class with the count of the repeats, and one line when it recovers.

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
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import IO, Any
from urllib.parse import parse_qs, unquote, urlsplit

from starlette.requests import ClientDisconnect
from starlette.types import Message, Receive, Scope, Send

from messageweave.asgi import HttpMiddleware
from messageweave.errors import request_id_of
from messageweave.jsonio import dump_json

_URL_CREDENTIALS = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")
_BOT_PATH = re.compile(r"/bot[^/\s]+")
# A URL's query field that holds a password (`redis+sentinel://…?sentinel_password=…`).
_QUERY_PASSWORD = re.compile(r"([?&][A-Za-z_]*password=)[^&#\s]+")
# A secret is replaced only as a whole value: never inside a longer name made of these.
_NAME_CHAR = r"[A-Za-z0-9_\-]"
MIN_SECRET_LEN = 4  # shorter values would turn ordinary words and addresses into "<secret>"
# The words of the placeholders this module writes: a secret equal to one is not redacted
# where it stands as that placeholder.
_PLACEHOLDER_WORDS = frozenset({"secret", "credentials", "token"})


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
        if "password=" in text:
            text = _QUERY_PASSWORD.sub(r"\1<secret>", text)
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
    escaped = re.escape(secret)
    # `<secret>` is what an earlier redaction wrote: never `<<secret>>` on a second pass.
    placeholder = rf"(?!(?<=<){escaped}>)" if secret in _PLACEHOLDER_WORDS else ""
    return re.compile(rf"(?<!{_NAME_CHAR}){placeholder}{escaped}(?!{_NAME_CHAR})")


def scrub_values(value: Any, secrets: Iterable[str | None], *,
                 drop: Container[str] = ()) -> Any:
    """`value` (a JSON-like value: the `fields` of a log line, an audit record) with every
    secret removed from its strings, at any depth. Mapping keys are kept exactly as given,
    never rewritten (a key in `drop` is left out with its value); numbers, booleans and None
    are kept; any other value becomes its redacted text."""
    return _values(value, _scrubber(tuple(secrets)), drop)


_PLAIN = (bool, int, float, type(None))  # kept as they are


def _values(value: Any, scrubber: _Scrubber, drop: Container[str]) -> Any:
    if isinstance(value, str):
        return scrubber.scrub(value)
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, dict):
        return {k: _values(v, scrubber, drop) for k, v in value.items() if k not in drop}
    if isinstance(value, list | tuple):
        return [_values(v, scrubber, drop) for v in value]
    return scrubber.scrub(str(value))


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
            # as it appears inside JSON text (a message or value that quotes a JSON body)
            values.add(json.dumps(value, ensure_ascii=False)[1:-1])
            values.add(json.dumps(value)[1:-1])
    return tuple(sorted(values, key=len, reverse=True))  # longest first: a token before its parts


def _current_scrubber() -> _Scrubber:
    return _scrubber(current_secrets())


def redact(text: str) -> str:
    return _current_scrubber().scrub(text)


def redis_url_password(url: str) -> str | None:
    """The password of `url`'s user (decoded: the value a server or an error could echo)."""
    try:
        password = urlsplit(url).password
    except ValueError:
        return None
    return unquote(password) if password is not None else None


def redis_url_secrets(url: str) -> list[str | None]:
    """Every password `REDIS_URL` holds, decoded: its user's and the sentinels'
    (`sentinel_password=`), as a secret source."""
    try:
        query = parse_qs(urlsplit(url).query)
    except ValueError:
        query = {}
    return [redis_url_password(url), *query.get("sentinel_password", [])]


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
        # the filter, or a second handler's, reads the set in force itself. Values only: the
        # keys of `fields` are names and are written as given.
        scrubber = record.__dict__.pop(_SCRUBBER_ATTR, None)
        if not isinstance(scrubber, _Scrubber):
            scrubber = _current_scrubber()
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": scrubber.scrub(record.getMessage()),
        }
        rid = request_id_var.get()
        if rid is not None:
            line["request_id"] = scrubber.scrub(rid)
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update(_values(fields, scrubber, ()))
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exception"] = scrubber.scrub(record.exc_text)
        return dump_json(line, default=str)


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
    # No line shows the caller's file, thread or process: the logging HOWTO's "Optimization"
    # switches spare every record the frame walk and the lookups (issue #14: one line per
    # request).
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
    return handler


# ---------------------------------------------------------------------------------- failures

MAX_REASON_CHARS = 240  # a reason is one line: longer text is cut (after it was redacted)
REPEAT_WINDOW_S = 60.0

# What an operator should check, by exception class name: the first class of the exception's
# MRO named here (so `redis.ConnectionError` finds `RedisError`). Names, not imports: this
# bottom module knows none of the clients. One place for every loop's failure lines.
REMEDIES: dict[str, str] = {
    "JmapTransportError": "could not reach the JMAP server: check jmap_session_url and that "
                          "the server is up",
    "JmapAuthError": "the JMAP server refused the login: check jmap_username and jmap_password",
    "JmapAccountError": "check account_id (empty = the primary mail account)",
    "JmapProtocolError": "the URL does not answer JMAP: check jmap_session_url",
    "NotConfigured": "no business configuration is live: save one on the admin page",
    "TelegramSendError": "check bot_token and that the Telegram Bot API is reachable",
    "LlmError": "check llm_base_url, llm_api_key and llm_model",
    "RedisError": "check REDIS_URL (or the data dir's embedded Redis) and that Redis is up",
    # `DeliveryFailure` classes of a Telegram send (`remedy_for("telegram " + class)`)
    "telegram auth": "Telegram refused the bot token: check bot_token",
    "telegram permission": "the bot may not write there: start it in the chat, check "
                           "telegram_chat_id",
    "telegram not_found": "check telegram_chat_id and chat_allowlist",
}
CERTIFICATE_REMEDY = ("the JMAP server's certificate is not trusted: paste it (or its CA) into "
                      "jmap_ca_pem; `openssl s_client -showcerts -connect host:443` prints it")
_CERTIFICATE_FAILURE = "certificate verify failed"  # ssl's text (CERTIFICATE_VERIFY_FAILED)


def remedy_for(name: str) -> str | None:
    return REMEDIES.get(name)


def is_certificate_failure(exc: BaseException) -> bool:
    """`exc` says the peer's TLS certificate was not trusted (ssl's verify failure)."""
    return _CERTIFICATE_FAILURE in str(exc).lower()


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc` and what caused it (httpx wraps httpcore, which wraps the OSError), at most 8."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(seen) < 8 and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def transport_kind(exc: BaseException) -> str:
    """The one classifier of a failure to reach a peer (every probe, and the Telegram client's
    failures): `timeout`, `tls`, `refused` or `unreachable`. By class names, like `remedy`:
    httpx's `TimeoutException`, `ssl.SSLError` and its subclasses."""
    chain = _chain(exc)

    def named(e: BaseException, *names: str) -> bool:
        return any(cls.__name__ in names for cls in type(e).__mro__)

    if any(isinstance(e, TimeoutError) or named(e, "TimeoutException") for e in chain):
        return "timeout"
    if any(named(e, "SSLError") or is_certificate_failure(e) for e in chain):
        return "tls"
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return "refused"
    return "unreachable"


def remedy(exc: BaseException) -> str | None:
    """What to check for `exc` (None when there is nothing better than its reason)."""
    names = [cls.__name__ for cls in type(exc).__mro__]
    if any(n.startswith("Jmap") for n in names) and is_certificate_failure(exc):
        return CERTIFICATE_REMEDY
    return next((REMEDIES[n] for n in names if n in REMEDIES), None)


def reason(exc: BaseException) -> str:
    """`exc`'s message on one line, every secret removed, cut to `MAX_REASON_CHARS`. Redacted
    before it is cut: a cut through a secret would leave a part no pattern recognises."""
    text = redact(" ".join(str(exc).split()))
    return text if len(text) <= MAX_REASON_CHARS else text[:MAX_REASON_CHARS - 1] + "…"


def failure_text(exc: BaseException) -> str:
    """`Class: reason; hint: remedy`, the part of a failure line after "… failed: "."""
    text = type(exc).__name__
    why = reason(exc)
    if why and why != text:
        text = f"{text}: {why}"
    return hinted(text, remedy(exc))


def hinted(text: str, hint: str | None) -> str:
    """`text; hint: hint`, the form of every failure line's remedy."""
    return f"{text}; hint: {hint}" if hint else text


@dataclass
class _Run:
    logged_at: float
    unlogged: int = 0  # failures since `logged_at` that were only counted


class RepeatLog:
    """The failure lines of background loops: one per (place, error class) at once, then at
    most one per `window_s`, which says how many there were (`… (N times in the last 60 s)`);
    the first success of a place after failures logs `… recovered after N failure(s)` once.
    `clock` (seconds, monotonic by default) is injectable: tests need not wait a minute."""

    def __init__(self, log: logging.Logger, *, window_s: float = REPEAT_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._log = log
        self._window_s = window_s
        self._clock = clock
        self._runs: dict[tuple[str, str], _Run] = {}
        self._failures: dict[str, int] = {}  # per place, since its last success

    def failed(self, place: str, exc: BaseException) -> None:
        now = self._clock()
        name = type(exc).__name__
        self._failures[place] = self._failures.get(place, 0) + 1
        run = self._runs.get((place, name))
        if run is not None and now - run.logged_at < self._window_s:
            run.unlogged += 1
            return
        repeats, counted = 1, ""
        if run is not None and run.unlogged:
            repeats = run.unlogged + 1
            counted = f" ({repeats} times in the last {now - run.logged_at:.0f} s)"
        self._runs[(place, name)] = _Run(now)
        self._log.warning("%s failed: %s%s", place, failure_text(exc), counted, extra={"fields": {
            "event": "failure", "place": place, "error": name, "repeats": repeats}})

    def recovered(self, place: str) -> None:
        failures = self._failures.pop(place, 0)
        if not failures:
            return
        for key in [k for k in self._runs if k[0] == place]:
            del self._runs[key]
        self._log.info("%s recovered after %d failure(s)", place, failures, extra={"fields": {
            "event": "recovered", "place": place, "failures": failures}})


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
