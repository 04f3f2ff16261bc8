"""Readiness probes shared by `/ready` and the debug surface: JMAP session (or, for an IMAP
wire, the IMAP login: `imap_login_failure`, the `mail` check) and Telegram getMe.

Every probe says why it failed as a `ProbeFailure`, its `kind` told by one classifier
(`transport_kind` for an exception, `answer_kind` for an HTTP status): connection refused,
timed out, TLS (the certificate), the credentials refused (401/403), otherwise unreachable or a
wrong answer (issue #34: the page, `diagnose` and `/ready` name the cause, not a guess).

`/ready` needs no credential and the gateway forwards it, so it must not turn requests into
calls to the peers: it runs each probe through a `Shared` check, at most one per peer at a time,
and reuses the answer for a few seconds (`probe_ttl`, docs/reference.md §3.1). The debug surface
and `messageweave diagnose` call the probe functions directly: they want a fresh answer and are
behind a credential or on the operator's own terminal.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx

from messageweave.chat.telegram import TelegramClient, TelegramSendError
from messageweave.config.model import BusinessConfig
from messageweave.config.outbound import OutboundConfig
from messageweave.logs import CERTIFICATE_REMEDY, transport_kind
from messageweave.mail.jmap import build_ssl_context
from messageweave.mail.kinds import kind_of

WELL_KNOWN = "/.well-known/jmap"


def jmap_origin_probe_url(configured: str) -> str:
    parts = urlsplit(configured.strip())
    return urlunsplit((parts.scheme, parts.netloc, WELL_KNOWN, "", ""))


log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 3.0
READY_CACHE_TTL_S = 5.0
"""How long `/ready` reuses a peer probe that passed, counted from when it finished."""
READY_FAILURE_TTL_S = 2.0
"""How long it reuses one that failed: shorter, so a recovered peer shows soon, yet a down peer
still gets at most one probe per this window (plus the probe's own timeout)."""


@dataclass(frozen=True)
class ProbeFailure:
    """Why a probe failed: `detail` is the documented short text (`/debug/jmap`, reference
    §3); `cause` and `remedy` tell the operator what went wrong and what to check (diagnose);
    `kind` is the cause as a code (`KINDS`) the page words in its own language. None of them
    holds a secret: no token, no password, no URL path or credentials."""

    detail: str
    cause: str
    remedy: str
    kind: str = "failed"


KINDS = ("refused", "timeout", "tls", "unauthorized", "unreachable", "answer",
         "not_configured", "failed")
"""`ProbeFailure.kind`: connection refused; no answer in time; TLS failed (an untrusted
certificate, a handshake); the peer refused the credentials (HTTP 401/403, a login refused);
not reachable otherwise (DNS, no route, reset); an answer that is not the expected one (another
HTTP status, a redirect); nothing to probe with; anything else."""

_KIND_WORDS = {"refused": "connection refused", "timeout": "timed out",
               "tls": "TLS failed: the certificate is not trusted or the handshake failed",
               "unreachable": "could not connect"}


def answer_kind(status: int) -> str:
    """The classifier of an HTTP answer that is not a success: `unauthorized` for 401/403."""
    return "unauthorized" if status in (401, 403) else "answer"


def _where(url: str) -> str:
    """`host:port` of `url`, never its path (a bot token) nor its credentials."""
    try:
        parts = httpx.URL(url)
    except httpx.InvalidURL:
        return "the configured address"
    port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    return f"{parts.host}:{port}"


_JMAP_FAILED = "jmap session probe failed"
_CHECK_SERVER = "check jmap_session_url and that the server is up"
_IMAP_FAILED = "imap login probe failed"
_CHECK_IMAP = "check imap_host, imap_port, imap_security and that the server is up"
_REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})
MAX_PROBE_REDIRECTS = 5


class _Moved(Exception):
    """The probe's answer was a redirect it does not follow (`cause` says why)."""

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


def _origin_of(url: str | httpx.URL) -> tuple[str, str, int | None]:
    u = httpx.URL(url)
    return (u.scheme, u.host, u.port or {"https": 443, "http": 80}.get(u.scheme))


async def _get_on_origin(client: httpx.AsyncClient, url: str, auth: httpx.Auth
                         ) -> httpx.Response:
    """GET `url`, following redirects by hand only while they stay on its origin (Cyrus
    answers `/.well-known/jmap` with a 301 to `/jmap`), as the JMAP client does: httpx itself
    follows none (issue #23: `/ready` runs this for anyone). `_Moved` for any other one."""
    origin, target = _origin_of(url), url
    for _ in range(MAX_PROBE_REDIRECTS + 1):
        response = await client.get(target, auth=auth)
        if response.status_code not in _REDIRECT_CODES:
            return response
        path = urlsplit(target).path or "/"
        location = response.headers.get("location")
        if not location:
            raise _Moved(f"{path} redirected (HTTP {response.status_code}) without a Location")
        try:
            nxt = urljoin(target, location)
            same = _origin_of(nxt) == origin
        except httpx.InvalidURL:
            raise _Moved(f"{path} redirected (HTTP {response.status_code}) to an invalid URL"
                         ) from None
        if not same:
            scheme, host, port = _origin_of(nxt)
            raise _Moved(f"{path} redirected (HTTP {response.status_code}) to another origin, "
                         f"{scheme}://{host}:{port}")
        target = nxt
    raise _Moved(f"more than {MAX_PROBE_REDIRECTS} redirects")


async def jmap_session_failure(cfg: BusinessConfig,
                               timeout_s: float = PROBE_TIMEOUT_S) -> ProbeFailure | None:
    """None when `GET {origin}/.well-known/jmap` with Basic auth answers 2xx (after redirects
    on that origin only), else why not. An IMAP wire (issue #33) has no JMAP session: not
    probed, it fails as not configured."""
    if not kind_of(cfg).jmap_session:
        return ProbeFailure("jmap not configured", "mail_source is imap, which this version "
                            "cannot read yet", "set mail_source to jmap", "not_configured")
    url = jmap_origin_probe_url(cfg.jmap_session_url)
    origin = url.removesuffix(WELL_KNOWN)  # the configured URL holds no credentials
    auth = httpx.BasicAuth(cfg.jmap_username, cfg.jmap_password)
    try:
        async with httpx.AsyncClient(
            timeout=timeout_s, follow_redirects=False,
            verify=build_ssl_context(ca_pem=cfg.jmap_extra_ca),
        ) as client:
            response = await asyncio.wait_for(_get_on_origin(client, url, auth), timeout_s)
    except _Moved as moved:
        return ProbeFailure(
            _JMAP_FAILED, moved.cause,
            "the credentials go only to the configured origin: set jmap_session_url to the "
            "JMAP server's own address (the one it redirects to, if you trust it)", "answer")
    except (TimeoutError, httpx.TimeoutException):
        return ProbeFailure("jmap session probe timed out",
                            f"no answer from {origin} within {timeout_s:g} s", _CHECK_SERVER,
                            "timeout")
    except httpx.HTTPError as exc:
        kind = transport_kind(exc)
        if kind == "tls":
            return ProbeFailure(_JMAP_FAILED, "the server's certificate is not trusted",
                                CERTIFICATE_REMEDY, kind)
        if isinstance(exc, httpx.ConnectError):
            words = "connection refused by" if kind == "refused" else "could not connect to"
            return ProbeFailure(_JMAP_FAILED, f"{words} {origin}", _CHECK_SERVER, kind)
        return ProbeFailure(_JMAP_FAILED, type(exc).__name__, _CHECK_SERVER, kind)
    if response.is_success:
        return None
    status = response.status_code
    if status in (401, 403):
        return ProbeFailure(
            _JMAP_FAILED, f"the server refused the username or password (HTTP {status})",
            "check jmap_username and jmap_password", answer_kind(status))
    return ProbeFailure(_JMAP_FAILED, f"{WELL_KNOWN} answered HTTP {status}",
                        "check jmap_session_url: it must be the JMAP server's address",
                        answer_kind(status))


async def imap_login_failure(cfg: BusinessConfig,
                             timeout_s: float = PROBE_TIMEOUT_S) -> ProbeFailure | None:
    """None when the IMAP server takes the login (then LOGOUT), else why not (never the
    password: the client's errors leave it out). The IMAP package is imported here, for an
    IMAP wire only (`services.peers`)."""
    from messageweave.mail.imap.errors import (
        ImapAuthError,
        ImapError,
        ImapTlsError,
        ImapTransportError,
    )
    from messageweave.mail.imap.watch import new_imap_client

    where = f"{cfg.imap_host}:{cfg.imap_port}"
    try:
        client = new_imap_client(cfg, OutboundConfig(jmap_timeout_ms=int(timeout_s * 1000)))
        async with asyncio.timeout(timeout_s), client:
            return None
    except ValueError as exc:
        return ProbeFailure(_IMAP_FAILED, str(exc), "check imap_security and imap_ca_pem")
    except TimeoutError:
        return ProbeFailure("imap login probe timed out",
                            f"no answer from {where} within {timeout_s:g} s", _CHECK_IMAP,
                            "timeout")
    except ImapAuthError:
        return ProbeFailure(_IMAP_FAILED, "the server refused the username or password",
                            "check imap_username and imap_password (an app password where "
                            "the provider asks for one)", "unauthorized")
    except ImapTlsError:
        return ProbeFailure(_IMAP_FAILED, "TLS failed (certificate or handshake)",
                            CERTIFICATE_REMEDY, "tls")
    except ImapTransportError as exc:
        kind = transport_kind(exc)
        words = "connection refused by" if kind == "refused" else "could not connect to"
        return ProbeFailure(_IMAP_FAILED, f"{words} {where}", _CHECK_IMAP, kind)
    except ImapError as exc:
        return ProbeFailure(_IMAP_FAILED, type(exc).__name__, _CHECK_IMAP)


Probe = Callable[[BusinessConfig], Awaitable[ProbeFailure | None]]


def mail_probe(cfg: BusinessConfig) -> tuple[str, Probe]:
    """`/ready`'s check of the mail server: `jmap` (the session) for a JMAP wire, `mail` (the
    IMAP login) for an IMAP one (SPEC F.1)."""
    check = kind_of(cfg).ready_check
    return check, {"jmap": jmap_session_failure, "mail": imap_login_failure}[check]


async def mail_server_failure(cfg: BusinessConfig) -> ProbeFailure | None:
    """The mail server's probe in full (diagnose): `jmap_session_failure` or
    `imap_login_failure`, as `mail_probe` chooses."""
    check = kind_of(cfg).ready_check
    return await {"jmap": jmap_session_failure, "mail": imap_login_failure}[check](cfg)


_TG_FAILED = "telegram get_me probe failed"
_TG_REMEDIES = {
    "refused": "the Bot API refuses connections: check telegram_api_base_url and that "
               "nothing on this machine's network blocks it",
    "timeout": "check this machine's network (a firewall or proxy dropping the connection?) "
               "and telegram_api_base_url",
    "tls": "the Bot API's certificate is not trusted: check telegram_api_base_url (a proxy "
           "that intercepts TLS?) and the system's CA certificates",
    "unauthorized": "check the bot token (BotFather's /token): Telegram refused it",
    "unreachable": "check telegram_api_base_url and this machine's DNS and network",
    "answer": "check telegram_api_base_url: it must be the Bot API's address",
}


async def telegram_get_me_failure(cfg: BusinessConfig, timeout_s: float = PROBE_TIMEOUT_S
                                  ) -> ProbeFailure | None:
    """None when the Bot API's getMe answers 2xx for the configured token, else why not."""
    if not cfg.bot_token.strip():
        return ProbeFailure("telegram bot token not configured", "no bot token is saved",
                            "set bot_token", "not_configured")
    base = cfg.telegram_api_base_url.rstrip("/")
    where = _where(base)
    try:  # the bot's own client (`TelegramClient.call`): what the probe passes, a send reaches
        async with TelegramClient(cfg.bot_token, base, timeout_s=timeout_s) as telegram:
            await telegram.get_me(timeout_s)
    except TelegramSendError as exc:
        return _telegram_failure(exc, where, timeout_s)
    return None


def _telegram_failure(exc: TelegramSendError, where: str, timeout_s: float) -> ProbeFailure:
    kind = exc.unreached
    if kind == "bad_url":
        return ProbeFailure(_TG_FAILED, "the bot token cannot be sent in a URL",
                            _TG_REMEDIES["unauthorized"], "unauthorized")
    if kind is not None:
        detail = "telegram get_me probe timed out" if kind == "timeout" else _TG_FAILED
        cause = (f"no answer from {where} within {timeout_s:g} s" if kind == "timeout"
                 else f"{_KIND_WORDS[kind]} ({where})")
        return ProbeFailure(detail, cause, _TG_REMEDIES[kind], kind)
    status = exc.status_code
    if status is None or 200 <= status < 300:  # an answer that is not the Bot API's
        return ProbeFailure(_TG_FAILED, f"getMe answered {exc.description or 'no user'}",
                            _TG_REMEDIES["answer"], "answer")
    kind = "unauthorized" if status == 404 else answer_kind(status)
    cause = ("Telegram refused the bot token" if kind == "unauthorized" else "getMe answered")
    return ProbeFailure(_TG_FAILED, f"{cause} (HTTP {status})", _TG_REMEDIES[kind], kind)


async def guarded(probe: Probe, cfg: BusinessConfig) -> ProbeFailure | None:
    """`probe(cfg)`, an unexpected exception counting as a failed probe (logged by its type):
    one probe answers many `/ready` requests, so it must answer rather than raise into all."""
    try:
        return await probe(cfg)
    except Exception as exc:
        log.warning("readiness probe raised %s", type(exc).__name__)
        return ProbeFailure("probe failed", type(exc).__name__, "", "failed")


def probe_ttl(result: ProbeFailure | None) -> float:
    """How long `/ready` reuses a peer probe's answer: `READY_CACHE_TTL_S` when it passed,
    `READY_FAILURE_TTL_S` when it failed."""
    return READY_CACHE_TTL_S if result is None else READY_FAILURE_TTL_S


T = TypeVar("T")


class Shared(Generic[T]):
    """One check that concurrent callers share: single-flight, then cached for `ttl(answer)`
    seconds after it finished (0: shared only while in flight), and made anew as soon as a
    caller asks for another `key` (for the peers, the configuration revision).

    Every caller awaits the same task, shielded: a caller that goes away does not cancel it
    for the others. So a burst costs one check per window, however large it is."""

    def __init__(self, ttl: Callable[[T], float], clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self._ttl = ttl
        self._clock = clock
        self._task: asyncio.Task[T] | None = None
        self._key: object = None
        self._fresh_until = 0.0  # set by the task itself, the moment it finishes

    async def get(self, key: object, check: Callable[[], Awaitable[T]]) -> T:
        """The answer of `check()` for `key`: the one in flight, a fresh cached one, or new."""
        task = self._task
        if (task is None or key != self._key
                or (task.done() and self._clock() >= self._fresh_until)):
            task = asyncio.create_task(self._run(check), name="shared-check")
            self._task, self._key, self._fresh_until = task, key, 0.0
        return await asyncio.shield(task)

    async def _run(self, check: Callable[[], Awaitable[T]]) -> T:
        result = await check()
        if self._task is asyncio.current_task():  # not replaced by a newer key meanwhile
            self._fresh_until = self._clock() + self._ttl(result)
        return result
