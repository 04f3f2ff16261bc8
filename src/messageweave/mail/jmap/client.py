"""`JmapClient`: the transport, session discovery and `call()`; the typed methods come from its
families (`MailMethods`, `PushMethods`, `ReadMethods`, `SubmitMethods`).

- Session discovery. A configured URL whose path is empty or "/" means `/.well-known/jmap` on
  that origin; any other path is the session resource itself. Redirects are followed only on the
  same origin (scheme, host and port); anything else raises `JmapRedirectError`. URLs in the
  session (`apiUrl`, `downloadUrl`, ...) may be relative (Cyrus sends `/jmap/`): they are resolved
  against the final session URL, and must be on its origin (`apiUrl`, `downloadUrl`, `uploadUrl`
  when the session is read, `eventSourceUrl` when it is used; `JmapProtocolError` otherwise):
  the Basic auth goes with every request to them (issue #23). There is no list of other
  origins to allow (reference §7.14).
- Account selection: the configured account id must be one of `session.accounts`, otherwise the
  primary account for `urn:ietf:params:jmap:mail`.
- HTTP Basic auth, HTTPS only unless `allow_insecure_http=True` (tests). TLS trust: an explicit
  `ca_file`, else `SSL_CERT_FILE` / `SSL_CERT_DIR` from the environment, else certifi; plus the
  PEM certificates of `ca_pem` (the business configuration's `jmap_ca_pem`) in every case.
- One timeout (seconds) for every HTTP exchange, as a whole (connect + send + read).
"""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import AsyncIterator, Sequence
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx

from messageweave.aio import AsyncClosing
from messageweave.mail.jmap import eventsource
from messageweave.mail.jmap.calls import CORE, MAIL, Invocation, MethodCall, MethodResponses
from messageweave.mail.jmap.errors import (
    JmapAccountError,
    JmapAuthError,
    JmapError,
    JmapOffOriginError,
    JmapProtocolError,
    JmapRedirectError,
    JmapRequestError,
    JmapTransportError,
)
from messageweave.mail.jmap.models import JmapSession
from messageweave.mail.jmap.parse import positive_int
from messageweave.mail.jmap.push import PushMethods
from messageweave.mail.jmap.source import SourceMethods
from messageweave.mail.jmap.submission import SubmitMethods

WELL_KNOWN = "/.well-known/jmap"
MAX_REDIRECTS = 5
_REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})
# How long an idle pooled connection is kept (issue #37). httpx's default, 5 s, dropped it
# between two mails: the catch-up after a quiet spell opened a new TLS connection (50–100 ms
# on Cyrus). Below Cyrus httpd's own idle timeout (`httptimeout`, 5 min); a connection the
# server closed sooner is seen closed when it is taken from the pool, and not used.
KEEPALIVE_S = 240.0
# Loading a trust store (certifi's: 40 ms) is the costliest step of applying a configuration;
# the contexts last made, by what they were made from (the store file's identity included).
_SSL_CONTEXTS_KEPT = 8
_ssl_contexts: dict[tuple[object, ...], ssl.SSLContext] = {}


def session_resource_url(configured: str) -> str:
    """The session resource for a configured URL: `/.well-known/jmap` if the path is empty."""
    parts = urlsplit(configured.strip())
    path = parts.path if parts.path not in ("", "/") else WELL_KNOWN
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def _origin(url: str | httpx.URL) -> tuple[str, str, int | None]:
    u = httpx.URL(url)
    port = u.port or {"https": 443, "http": 80}.get(u.scheme)
    return (u.scheme, u.host, port)


def _same_origin(url: str, other: str) -> bool:
    try:
        return _origin(url) == _origin(other)
    except httpx.InvalidURL:
        return False


def _origin_text(url: str | httpx.URL) -> str:
    scheme, host, port = _origin(url)
    return f"{scheme}://{host}:{port}"


def build_ssl_context(
    ca_file: str | os.PathLike[str] | None = None, *, ca_pem: str | None = None
) -> ssl.SSLContext:
    """TLS trust: `ca_file` if given, else SSL_CERT_FILE / SSL_CERT_DIR, else certifi; and
    `ca_pem` (PEM certificates, e.g. a self-signed server's) trusted in addition.

    The environment is read on every call, not once: a new runtime sees the current trust. A
    context made from the same store file (same path, size and modification time), directory
    and `ca_pem` before is used again."""
    cafile: str | None
    capath: str | None
    if ca_file is not None:
        cafile, capath = os.fspath(ca_file), None
    else:
        cafile = os.environ.get("SSL_CERT_FILE") or None
        capath = os.environ.get("SSL_CERT_DIR") or None
    if not (cafile or capath):
        import certifi

        cafile = certifi.where()
    key = (cafile, _identity(cafile), capath, _identity(capath), ca_pem)
    context = _ssl_contexts.get(key)
    if context is None:
        context = _new_ssl_context(cafile, capath, ca_pem)
        if len(_ssl_contexts) >= _SSL_CONTEXTS_KEPT:
            _ssl_contexts.pop(next(iter(_ssl_contexts)))
        _ssl_contexts[key] = context
    return context


def _identity(path: str | None) -> tuple[int, int, int] | None:
    """What tells a changed file or directory apart: inode, size, modification time."""
    try:
        st = os.stat(path) if path else None
    except OSError:
        return None
    return None if st is None else (st.st_ino, st.st_size, st.st_mtime_ns)


def _new_ssl_context(cafile: str | None, capath: str | None, ca_pem: str | None
                     ) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cafile=cafile, capath=capath)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cannot load the TLS trust store {cafile or capath}: {exc}") from None
    if ca_pem:
        try:
            context.load_verify_locations(cadata=ca_pem)
        except ssl.SSLError as exc:
            raise ValueError(f"cannot load the JMAP CA certificates: {exc}") from None
    return context


class JmapClient(SourceMethods, PushMethods, SubmitMethods, AsyncClosing):
    """An async JMAP client for one account. Use `async with JmapClient(...) as c:`."""

    def __init__(
        self,
        url: str,
        username: str,
        password: str,
        *,
        account_id: str | None = None,
        timeout: float = 15.0,
        ca_file: str | os.PathLike[str] | None = None,
        ca_pem: str | None = None,
        verify: ssl.SSLContext | None = None,
        allow_insecure_http: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
        user_agent: str = "messageweave-jmap",
    ) -> None:
        parts = urlsplit(url.strip())
        allowed = ("https", "http") if allow_insecure_http else ("https",)
        if parts.scheme not in allowed or not parts.hostname:
            raise ValueError("JMAP URL must be an https:// URL")
        if parts.username is not None or parts.password is not None:
            raise ValueError("JMAP URL must not contain credentials")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self._session_url = session_resource_url(url)
        self._username = username
        self._configured_account = account_id
        self._timeout = float(timeout)
        self._allowed_schemes = allowed
        self._http = httpx.AsyncClient(
            auth=httpx.BasicAuth(username, password),
            timeout=httpx.Timeout(self._timeout),
            verify=verify if verify is not None else build_ssl_context(ca_file, ca_pem=ca_pem),
            follow_redirects=False,
            limits=httpx.Limits(max_connections=100, max_keepalive_connections=20,
                                keepalive_expiry=KEEPALIVE_S),
            transport=transport,
            headers={"User-Agent": user_agent, "Accept": "application/json"},
        )
        self._session: JmapSession | None = None
        self._account_id: str | None = None
        self._session_stale = False
        self._session_state: str | None = None
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return (
            f"JmapClient(url={self._session_url!r}, username={self._username!r}, "
            f"account_id={self._account_id or self._configured_account!r})"
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    # ------------------------------------------------------------------ session

    @property
    def session_url(self) -> str:
        return self._session_url

    @property
    def session(self) -> JmapSession | None:
        """The session fetched last, or None before the first request."""
        return self._session

    @property
    def account_id(self) -> str:
        """The selected account id; the session must have been fetched (`get_session()`)."""
        if self._account_id is None:
            raise JmapError("no JMAP session yet: await get_session() first")
        return self._account_id

    @property
    def session_state(self) -> str | None:
        """The latest session state seen (session resource or a response's `sessionState`)."""
        return self._session_state

    async def get_session(self, *, refresh: bool = False) -> JmapSession:
        """Fetch (once, or again when `refresh` or when a response said it changed)."""
        async with self._lock:
            if self._session is None or refresh or self._session_stale:
                session = await self._fetch_session()
                self._account_id = self._select_account(session)
                self._session = session
                self._session_state = session.state
                self._session_stale = False
            return self._session

    async def _fetch_session(self) -> JmapSession:
        url = self._session_url
        for _ in range(MAX_REDIRECTS + 1):
            resp = await self._send("GET", url, what="session")
            if resp.status_code not in _REDIRECT_CODES:
                break
            location = resp.headers.get("location")
            if not location:
                raise JmapProtocolError(
                    f"session redirect (HTTP {resp.status_code}) without Location"
                )
            target = urljoin(url, location)
            try:
                same_origin = _origin(target) == _origin(self._session_url)
            except httpx.InvalidURL:
                raise JmapRedirectError("session redirect to an invalid URL refused") from None
            if not same_origin:
                raise JmapRedirectError(
                    f"session redirect to another origin refused: {_origin_text(target)} "
                    f"(configured {_origin_text(self._session_url)})"
                )
            url = target
        else:
            raise JmapRedirectError(f"more than {MAX_REDIRECTS} redirects for the session")
        data = self._json(resp, "session")
        return self._parse_session(data, url)

    def _parse_session(self, data: Any, url: str) -> JmapSession:
        if not isinstance(data, dict):
            raise JmapProtocolError("session resource is not a JSON object")

        def url_field(name: str, required: bool, same_origin: bool = True) -> str:
            value = data.get(name)
            if not isinstance(value, str) or not value:
                if required:
                    raise JmapProtocolError(f"session has no {name}")
                return ""
            resolved = urljoin(url, value)
            if urlsplit(resolved).scheme not in self._allowed_schemes:
                raise JmapProtocolError(f"session {name} is not https")
            if same_origin and not _same_origin(resolved, url):
                # The Basic auth goes with every call to it (issue #23).
                raise JmapOffOriginError(f"session {name} is not on the session's origin")
            return resolved

        capabilities = data.get("capabilities")
        accounts = data.get("accounts")
        primary = data.get("primaryAccounts")
        if not isinstance(capabilities, dict) or not isinstance(accounts, dict):
            raise JmapProtocolError("session has no capabilities or accounts")
        core = capabilities.get(CORE)
        core = core if isinstance(core, dict) else {}
        return JmapSession(
            url=url,
            api_url=url_field("apiUrl", True),
            download_url=url_field("downloadUrl", False),
            upload_url=url_field("uploadUrl", False),
            # Checked where it is used (`event_source_url`): a session whose EventSource is
            # elsewhere still serves the calls, with push through PushSubscription or polling.
            event_source_url=url_field("eventSourceUrl", False, same_origin=False),
            state=str(data.get("state", "")),
            username=str(data.get("username", "")),
            capabilities=capabilities,
            accounts=accounts,
            primary_accounts=(
                {k: v for k, v in primary.items() if isinstance(v, str)}
                if isinstance(primary, dict)
                else {}
            ),
            max_objects_in_get=positive_int(core.get("maxObjectsInGet"), 500),
            max_calls_in_request=positive_int(core.get("maxCallsInRequest"), 16),
        )

    def _select_account(self, session: JmapSession) -> str:
        if self._configured_account is not None:
            if self._configured_account not in session.accounts:
                raise JmapAccountError("ACCOUNT_ID is not in session accounts")
            return self._configured_account
        primary = session.primary_accounts.get(MAIL)
        if not primary or primary not in session.accounts:
            raise JmapAccountError("the session has no primary account for JMAP mail")
        return primary

    # ------------------------------------------------------------------ HTTP

    async def _send(self, method: str, url: str, *, what: str, json: Any = None) -> httpx.Response:
        try:
            async with asyncio.timeout(self._timeout):
                resp = await self._http.request(method, url, json=json)
        except (TimeoutError, httpx.TimeoutException):
            raise JmapTransportError(
                f"JMAP {what} request to {_origin_text(url)} timed out after {self._timeout:g} s"
            ) from None
        except httpx.InvalidURL:
            raise JmapProtocolError(f"invalid JMAP {what} URL") from None
        except httpx.HTTPError as exc:
            raise JmapTransportError(
                f"JMAP {what} request to {_origin_text(url)} failed: {type(exc).__name__}: {exc}"
            ) from None
        if resp.status_code in (401, 403):
            raise JmapAuthError(
                f"JMAP server refused the credentials for {what} (HTTP {resp.status_code})",
                status=resp.status_code,
            )
        if resp.status_code >= 500 or resp.status_code == 429:
            raise JmapTransportError(
                f"JMAP server error for {what}: HTTP {resp.status_code}", status=resp.status_code
            )
        if 400 <= resp.status_code < 500:
            raise self._request_error(resp, what)
        return resp

    @staticmethod
    def _request_error(resp: httpx.Response, what: str) -> JmapRequestError:
        problem: Any = None
        try:
            problem = resp.json()
        except ValueError:
            pass
        if not isinstance(problem, dict):
            problem = {}
        ptype = problem.get("type") if isinstance(problem.get("type"), str) else None
        detail = problem.get("detail") if isinstance(problem.get("detail"), str) else None
        limit = problem.get("limit") if isinstance(problem.get("limit"), str) else None
        text = f"JMAP {what} request rejected: HTTP {resp.status_code}"
        if ptype:
            text += f" {ptype}"
        if limit:
            text += f" (limit {limit})"
        if detail:
            text += f": {detail[:300]}"
        return JmapRequestError(
            text, status=resp.status_code, type=ptype, detail=detail, limit=limit
        )

    @staticmethod
    def _json(resp: httpx.Response, what: str) -> Any:
        if resp.status_code != 200:
            raise JmapProtocolError(f"unexpected HTTP {resp.status_code} for JMAP {what}")
        try:
            return resp.json()
        except ValueError:
            raise JmapProtocolError(f"JMAP {what} response is not JSON") from None

    # ------------------------------------------------------------------ EventSource

    def event_source_url(self, *, types: Sequence[str], ping_s: int) -> str | None:
        """The session's `eventSourceUrl` expanded for `types`, `closeafter=no` and `ping`
        (None when the session offers none). It must share the session resource's origin:
        the credentials go with it (`JmapProtocolError` otherwise)."""
        session = self._session
        if session is None or not session.event_source_url:
            return None
        url = eventsource.expand(session.event_source_url, types=",".join(types),
                                 closeafter="no", ping=str(ping_s))
        try:
            same = _origin(url) == _origin(session.url)
        except httpx.InvalidURL:
            same = False
        if not same:
            raise JmapOffOriginError("session eventSourceUrl is not on the session's origin")
        return url

    async def events(self, url: str, *, ping_s: int) -> AsyncIterator[eventsource.Event]:
        """The events of one EventSource connection (RFC 8620 §7.3), until the server closes
        it or nothing (not even a ping) arrives for two pings and a margin: then
        `JmapTransportError`. The first event is `eventsource.OPEN` (type `open`), as soon
        as the server accepted the connection. A refusal raises like any request
        (`JmapAuthError`, ...); an answer that is not `text/event-stream` (Debian's Cyrus
        answers 204) or that is compressed is a `JmapProtocolError`. The stream is read raw,
        its lines and events capped (`eventsource.MAX_LINE_BYTES`, `MAX_EVENT_CHARS`): one over
        its cap ends the connection with a `JmapTransportError` that quotes none of it."""
        silence_s = 2 * ping_s + 5
        timeout = httpx.Timeout(self._timeout, read=silence_s)
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache",
                   "Accept-Encoding": "identity"}
        lines, parser = eventsource.LineSplitter(), eventsource.SseParser()
        try:
            async with self._http.stream("GET", url, headers=headers, timeout=timeout) as resp:
                self._check_stream(resp)
                yield eventsource.OPEN
                async for chunk in resp.aiter_raw():
                    for line in lines.feed(chunk):
                        event = parser.feed(line)
                        if event is not None:
                            yield event
        except eventsource.StreamTooLarge as exc:
            raise JmapTransportError(
                f"JMAP EventSource at {_origin_text(url)} sent {exc}") from None
        except httpx.TimeoutException:
            raise JmapTransportError(
                f"JMAP EventSource at {_origin_text(url)} was silent for {silence_s} s") from None
        except httpx.HTTPError as exc:
            raise JmapTransportError(
                f"JMAP EventSource at {_origin_text(url)} failed: {type(exc).__name__}"
            ) from None
        raise JmapTransportError(f"JMAP EventSource at {_origin_text(url)} closed the stream")

    def _check_stream(self, resp: httpx.Response) -> None:
        if resp.status_code in (401, 403):
            raise JmapAuthError(
                f"JMAP server refused the credentials for EventSource (HTTP {resp.status_code})",
                status=resp.status_code)
        if resp.status_code >= 500 or resp.status_code == 429:
            raise JmapTransportError(f"JMAP server error for EventSource: HTTP "
                                     f"{resp.status_code}", status=resp.status_code)
        kind = resp.headers.get("content-type", "").split(";")[0].strip().lower()
        if resp.status_code != 200 or kind != "text/event-stream":
            raise JmapProtocolError(
                f"JMAP EventSource answered HTTP {resp.status_code} "
                f"{kind or 'without a content type'}, not an event stream")
        if resp.headers.get("content-encoding", "identity").strip().lower() != "identity":
            # asked for identity: a compressed stream would be inflated past every cap
            raise JmapProtocolError("JMAP EventSource answered a compressed event stream")

    # ------------------------------------------------------------------ generic call

    async def call(
        self, method_calls: Sequence[MethodCall], *, using: Sequence[str] = (CORE, MAIL)
    ) -> MethodResponses:
        """Send one JMAP request; method errors are returned in place (see `result()`)."""
        session = await self.get_session()
        if not method_calls:
            raise ValueError("no method calls")
        if len(method_calls) > session.max_calls_in_request:
            raise ValueError(
                f"{len(method_calls)} calls exceed maxCallsInRequest "
                f"({session.max_calls_in_request})"
            )
        body = {
            "using": list(using),
            "methodCalls": [[name, dict(args), call_id] for name, args, call_id in method_calls],
        }
        resp = await self._send("POST", session.api_url, what="API", json=body)
        data = self._json(resp, "API")
        raw = data.get("methodResponses") if isinstance(data, dict) else None
        if not isinstance(raw, list):
            raise JmapProtocolError("JMAP API response has no methodResponses")
        invocations: list[Invocation] = []
        for item in raw:
            if (
                not isinstance(item, list)
                or len(item) != 3
                or not isinstance(item[0], str)
                or not isinstance(item[1], dict)
                or not isinstance(item[2], str)
            ):
                raise JmapProtocolError("malformed invocation in methodResponses")
            invocations.append(Invocation(item[0], item[1], item[2]))
        state = data.get("sessionState")
        session_state = state if isinstance(state, str) else None
        if session_state is not None:
            self._session_state = session_state
            if session_state != session.state:
                self._session_stale = True  # RFC 8620 §3.4: refetch the session
        return MethodResponses(invocations, session_state, method_calls)
