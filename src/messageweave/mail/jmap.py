"""A thin async JMAP client (RFC 8620 core, RFC 8621 mail) on httpx.

What it does:

- Session discovery. A configured URL whose path is empty or "/" means `/.well-known/jmap` on
  that origin; any other path is the session resource itself. Redirects are followed only on the
  same origin (scheme, host and port); anything else raises `JmapRedirectError`. URLs in the
  session (`apiUrl`, `downloadUrl`, ...) may be relative (Cyrus sends `/jmap/`): they are resolved
  against the final session URL.
- Account selection: the configured account id must be one of `session.accounts`, otherwise the
  primary account for `urn:ietf:params:jmap:mail`.
- HTTP Basic auth, HTTPS only unless `allow_insecure_http=True` (tests). TLS trust: an explicit
  `ca_file`, else `SSL_CERT_FILE` / `SSL_CERT_DIR` from the environment, else certifi.
- One timeout (seconds) for every HTTP exchange, as a whole (connect + send + read).
- Errors are typed: `JmapTransportError` (network, timeout, HTTP 5xx/429), `JmapAuthError`
  (401/403), `JmapRequestError` (RFC 8620 §3.6.1 problem JSON), `JmapMethodError` and one subclass
  per RFC method-level error type (`CannotCalculateChanges`, `InvalidArguments`, ...), and
  `JmapSetError` for a refused create/update/destroy. The password never appears in a message or
  a repr.
- `call()` sends any batch of method calls (with back-references, see `result_ref`); the typed
  helpers build on it.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, ClassVar, Self, overload
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx

CORE = "urn:ietf:params:jmap:core"
MAIL = "urn:ietf:params:jmap:mail"
WELL_KNOWN = "/.well-known/jmap"
MAX_REDIRECTS = 5
DEFAULT_EMAIL_PROPERTIES: tuple[str, ...] = (
    "from",
    "subject",
    "receivedAt",
    "mailboxIds",
    "keywords",
    "preview",
)
NEWEST_FIRST: tuple[Mapping[str, Any], ...] = ({"property": "receivedAt", "isAscending": False},)
_REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})

MethodCall = tuple[str, Mapping[str, Any], str]
"""One invocation to send: (method name, arguments, call id)."""


# ---------------------------------------------------------------------------------- errors


class JmapError(Exception):
    """Base of every error this client raises."""


class JmapTransportError(JmapError):
    """The server could not be reached or failed: network error, timeout, HTTP 5xx or 429."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class JmapAuthError(JmapError):
    """The server refused the credentials (HTTP 401 or 403)."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class JmapProtocolError(JmapError):
    """The server answered something that is not valid JMAP (wrong status, not JSON, ...)."""


class JmapRedirectError(JmapProtocolError):
    """Session discovery was redirected to another origin (refused) or redirected too often."""


class JmapAccountError(JmapError):
    """The configured account is not in the session, or there is no primary mail account."""


class JmapRequestError(JmapError):
    """A request-level error (RFC 8620 §3.6.1), e.g. `urn:ietf:params:jmap:error:notRequest`."""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        type: str | None,
        detail: str | None = None,
        limit: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.detail = detail
        self.limit = limit


class JmapMethodError(JmapError):
    """A method-level error response `["error", {"type": ...}, callId]` (RFC 8620 §3.6.2).

    `JmapMethodError.create()` returns the subclass registered for the type (for example
    `CannotCalculateChanges`), or this class for a type without one.
    """

    error_type: ClassVar[str | None] = None
    registry: ClassVar[dict[str, type[JmapMethodError]]] = {}

    def __init__(
        self,
        type: str,
        *,
        method: str | None = None,
        call_id: str | None = None,
        description: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        self.type = type
        self.method = method
        self.call_id = call_id
        self.description = description
        self.details: dict[str, Any] = dict(details or {})
        text = f"{method or 'JMAP method'} failed: {type}"
        if description:
            text += f" ({description})"
        elif "arguments" in self.details:
            text += f" (arguments: {self.details['arguments']})"
        super().__init__(text)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.error_type:
            JmapMethodError.registry[cls.error_type] = cls

    @classmethod
    def create(
        cls,
        arguments: Mapping[str, Any],
        *,
        method: str | None = None,
        call_id: str | None = None,
    ) -> JmapMethodError:
        error_type = arguments.get("type")
        if not isinstance(error_type, str):
            error_type = "serverFail"
        description = arguments.get("description")
        details = {k: v for k, v in arguments.items() if k not in ("type", "description")}
        klass = cls.registry.get(error_type, JmapMethodError)
        return klass(
            error_type,
            method=method,
            call_id=call_id,
            description=description if isinstance(description, str) else None,
            details=details,
        )


class ServerUnavailable(JmapMethodError):
    error_type = "serverUnavailable"


class ServerFail(JmapMethodError):
    error_type = "serverFail"


class ServerPartialFail(JmapMethodError):
    error_type = "serverPartialFail"


class UnknownMethod(JmapMethodError):
    error_type = "unknownMethod"


class InvalidArguments(JmapMethodError):
    error_type = "invalidArguments"


class InvalidResultReference(JmapMethodError):
    error_type = "invalidResultReference"


class Forbidden(JmapMethodError):
    error_type = "forbidden"


class AccountNotFound(JmapMethodError):
    error_type = "accountNotFound"


class AccountNotSupportedByMethod(JmapMethodError):
    error_type = "accountNotSupportedByMethod"


class AccountReadOnly(JmapMethodError):
    error_type = "accountReadOnly"


class RequestTooLarge(JmapMethodError):
    error_type = "requestTooLarge"


class StateMismatch(JmapMethodError):
    error_type = "stateMismatch"


class CannotCalculateChanges(JmapMethodError):
    error_type = "cannotCalculateChanges"


class AnchorNotFound(JmapMethodError):
    error_type = "anchorNotFound"


class UnsupportedSort(JmapMethodError):
    error_type = "unsupportedSort"


class UnsupportedFilter(JmapMethodError):
    error_type = "unsupportedFilter"


class TooManyChanges(JmapMethodError):
    error_type = "tooManyChanges"


class JmapSetError(JmapError):
    """A /set call refused one object (`notCreated` / `notUpdated` / `notDestroyed`)."""

    def __init__(
        self, method: str, object_id: str, arguments: Mapping[str, Any], action: str
    ) -> None:
        error_type = arguments.get("type")
        self.type = error_type if isinstance(error_type, str) else "unknown"
        description = arguments.get("description")
        self.description = description if isinstance(description, str) else None
        properties = arguments.get("properties")
        self.properties = (
            [p for p in properties if isinstance(p, str)] if isinstance(properties, list) else []
        )
        self.method = method
        self.object_id = object_id
        text = f"{method} could not {action} {object_id!r}: {self.type}"
        if self.description:
            text += f" ({self.description})"
        if self.properties:
            text += f" properties={self.properties}"
        super().__init__(text)


# ---------------------------------------------------------------------------------- data


@dataclass(frozen=True)
class JmapSession:
    """The parts of the session resource (RFC 8620 §2) this client uses; URLs are absolute."""

    url: str
    api_url: str
    download_url: str
    upload_url: str
    event_source_url: str
    state: str
    username: str
    capabilities: Mapping[str, Any]
    accounts: Mapping[str, Any]
    primary_accounts: Mapping[str, str]
    max_objects_in_get: int
    max_calls_in_request: int


@dataclass(frozen=True)
class Invocation:
    """One method response: `[name, arguments, callId]`; name "error" for a method error."""

    name: str
    arguments: dict[str, Any]
    call_id: str

    @property
    def is_error(self) -> bool:
        return self.name == "error"


class MethodResponses(Sequence[Invocation]):
    """The `methodResponses` of one request, in order, plus the response `sessionState`."""

    def __init__(
        self,
        invocations: Sequence[Invocation],
        session_state: str | None,
        calls: Sequence[MethodCall] = (),
    ) -> None:
        self._items = list(invocations)
        self.session_state = session_state
        self._methods = {call_id: name for name, _args, call_id in calls}

    @overload
    def __getitem__(self, index: int) -> Invocation: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Invocation]: ...
    def __getitem__(self, index: int | slice) -> Invocation | Sequence[Invocation]:
        return self._items[index]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Invocation]:
        return iter(self._items)

    def __repr__(self) -> str:
        return f"MethodResponses({self._items!r}, session_state={self.session_state!r})"

    def error(self, call_id: str) -> JmapMethodError | None:
        """The method error answered for `call_id`, if any."""
        for inv in self._items:
            if inv.call_id == call_id and inv.is_error:
                return JmapMethodError.create(
                    inv.arguments, method=self._methods.get(call_id), call_id=call_id
                )
        return None

    def result(self, call_id: str, name: str | None = None) -> dict[str, Any]:
        """The arguments answered for `call_id` (and `name`, when one call id has several).

        Raises the typed `JmapMethodError` if the server answered an error for it, and
        `JmapProtocolError` if there is no response for it at all.
        """
        err = self.error(call_id)
        if err is not None:
            raise err
        for inv in self._items:
            if inv.call_id == call_id and (name is None or inv.name == name):
                return inv.arguments
        raise JmapProtocolError(f"no {name or 'method'} response for call id {call_id!r}")


def result_ref(call_id: str, name: str, path: str) -> dict[str, str]:
    """A result reference (RFC 8620 §3.7), used as the value of a `#argument`."""
    return {"resultOf": call_id, "name": name, "path": path}


@dataclass(frozen=True)
class Mailbox:
    id: str
    name: str
    role: str | None
    parent_id: str | None = None


@dataclass(frozen=True)
class EmailChanges:
    old_state: str
    new_state: str
    has_more: bool
    created: list[str]
    updated: list[str]
    destroyed: list[str]


@dataclass(frozen=True)
class EmailQueryResult:
    ids: list[str]
    query_state: str
    position: int
    total: int | None
    can_calculate_changes: bool


@dataclass(frozen=True)
class EmailMeta:
    """What the assistant needs of one email.

    `sender` is "Name <addr>" (or the bare address) of the first From address. `received_at` is
    Unix seconds. `text` is set only when fetched: the text body parts joined in `textBody` order,
    capped at `body_max_bytes` (then `text_truncated` is true).
    """

    id: str
    sender: str | None
    subject: str | None
    received_at: int | None
    mailbox_ids: frozenset[str]
    keywords: frozenset[str]
    preview: str
    text: str | None = None
    text_truncated: bool = False


@dataclass(frozen=True)
class EmailPage:
    """Email/query + Email/get in one request: the ids in query order and their emails."""

    ids: list[str]
    query_state: str
    total: int | None
    emails: list[EmailMeta]


@dataclass(frozen=True)
class SearchSnippet:
    """SearchSnippet/get (RFC 8621 §5): matched terms wrapped in `<mark>`; None if no match."""

    email_id: str
    subject: str | None
    preview: str | None


@dataclass(frozen=True)
class SearchResult:
    """Text search. `ids` and `emails` are in result order (newest first); `snippets` may be
    empty when the server could not make them (then `snippet_error` says why)."""

    ids: list[str]
    emails: list[EmailMeta]
    snippets: list[SearchSnippet]
    snippet_error: JmapMethodError | None = field(default=None, compare=False)

    def snippet(self, email_id: str) -> SearchSnippet | None:
        return next((s for s in self.snippets if s.email_id == email_id), None)


@dataclass(frozen=True)
class PushSubscription:
    id: str
    expires: str | None  # UTCDate; None = no expiry (or, with expires_known False, not told)
    expires_known: bool = True


@dataclass(frozen=True)
class PushSubscriptionLookup:
    found: dict[str, PushSubscription]
    not_found: list[str]


# ---------------------------------------------------------------------------------- client


def session_resource_url(configured: str) -> str:
    """The session resource for a configured URL: `/.well-known/jmap` if the path is empty."""
    parts = urlsplit(configured.strip())
    path = parts.path if parts.path not in ("", "/") else WELL_KNOWN
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def _origin(url: str | httpx.URL) -> tuple[str, str, int | None]:
    u = httpx.URL(url)
    port = u.port or {"https": 443, "http": 80}.get(u.scheme)
    return (u.scheme, u.host, port)


def _origin_text(url: str | httpx.URL) -> str:
    scheme, host, port = _origin(url)
    return f"{scheme}://{host}:{port}"


def build_ssl_context(ca_file: str | os.PathLike[str] | None = None) -> ssl.SSLContext:
    """TLS trust: `ca_file` if given, else SSL_CERT_FILE / SSL_CERT_DIR, else certifi."""
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
    try:
        return ssl.create_default_context(cafile=cafile, capath=capath)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cannot load the TLS trust store {cafile or capath}: {exc}") from None


class JmapClient:
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
            verify=verify if verify is not None else build_ssl_context(ca_file),
            follow_redirects=False,
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

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

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

        def url_field(name: str, required: bool) -> str:
            value = data.get(name)
            if not isinstance(value, str) or not value:
                if required:
                    raise JmapProtocolError(f"session has no {name}")
                return ""
            resolved = urljoin(url, value)
            if urlsplit(resolved).scheme not in self._allowed_schemes:
                raise JmapProtocolError(f"session {name} is not https")
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
            event_source_url=url_field("eventSourceUrl", False),
            state=str(data.get("state", "")),
            username=str(data.get("username", "")),
            capabilities=capabilities,
            accounts=accounts,
            primary_accounts=(
                {k: v for k, v in primary.items() if isinstance(v, str)}
                if isinstance(primary, dict)
                else {}
            ),
            max_objects_in_get=_positive_int(core.get("maxObjectsInGet"), 500),
            max_calls_in_request=_positive_int(core.get("maxCallsInRequest"), 16),
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

    async def _call_one(
        self, name: str, arguments: Mapping[str, Any], *, using: Sequence[str] = (CORE, MAIL)
    ) -> dict[str, Any]:
        responses = await self.call([(name, arguments, "0")], using=using)
        return responses.result("0", name)

    async def _account(self) -> str:
        await self.get_session()
        return self.account_id

    # ------------------------------------------------------------------ mail helpers

    async def mailboxes(self) -> list[Mailbox]:
        """Every mailbox of the account (Mailbox/get ids=null), with its role (or None)."""
        res = await self._call_one(
            "Mailbox/get",
            {
                "accountId": await self._account(),
                "ids": None,
                "properties": ["id", "name", "role", "parentId"],
            },
        )
        return [
            Mailbox(
                id=str(m["id"]),
                name=str(m.get("name") or ""),
                role=_opt_str(m.get("role")),
                parent_id=_opt_str(m.get("parentId")),
            )
            for m in _dicts(res.get("list"))
            if "id" in m
        ]

    async def email_state(self) -> str:
        """The current Email state (Email/get with ids=[])."""
        res = await self._call_one("Email/get", {"accountId": await self._account(), "ids": []})
        return _req_str(res, "state", "Email/get")

    async def email_changes(self, since_state: str, max_changes: int | None = None) -> EmailChanges:
        """Email/changes. Raises `CannotCalculateChanges` (or, Cyrus for a malformed state,
        `InvalidArguments`) when the state is too old or unknown."""
        args: dict[str, Any] = {"accountId": await self._account(), "sinceState": since_state}
        if max_changes is not None:
            if max_changes <= 0:
                raise ValueError("max_changes must be positive")
            args["maxChanges"] = max_changes
        res = await self._call_one("Email/changes", args)
        return EmailChanges(
            old_state=str(res.get("oldState", since_state)),
            new_state=_req_str(res, "newState", "Email/changes"),
            has_more=bool(res.get("hasMoreChanges", False)),
            created=_strs(res.get("created")),
            updated=_strs(res.get("updated")),
            destroyed=_strs(res.get("destroyed")),
        )

    async def query_emails(
        self,
        filter: Mapping[str, Any] | None = None,
        sort: Sequence[Mapping[str, Any]] | None = NEWEST_FIRST,
        position: int = 0,
        limit: int | None = None,
        *,
        calculate_total: bool = False,
    ) -> EmailQueryResult:
        """Email/query: ids (newest first by default) and the query state."""
        res = await self._call_one(
            "Email/query",
            self._query_args(await self._account(), filter, sort, position, limit, calculate_total),
        )
        return EmailQueryResult(
            ids=_strs(res.get("ids")),
            query_state=str(res.get("queryState", "")),
            position=_int(res.get("position")) or 0,
            total=_int(res.get("total")),
            can_calculate_changes=bool(res.get("canCalculateChanges", False)),
        )

    @staticmethod
    def _query_args(
        account: str,
        filter: Mapping[str, Any] | None,
        sort: Sequence[Mapping[str, Any]] | None,
        position: int,
        limit: int | None,
        calculate_total: bool,
    ) -> dict[str, Any]:
        args: dict[str, Any] = {"accountId": account}
        if filter is not None:
            args["filter"] = dict(filter)
        if sort is not None:
            args["sort"] = [dict(s) for s in sort]
        if position:
            args["position"] = position
        if limit is not None:
            if limit < 0:
                raise ValueError("limit must not be negative")
            args["limit"] = limit
        if calculate_total:
            args["calculateTotal"] = True
        return args

    @staticmethod
    def _get_args(
        account: str,
        properties: Sequence[str] | None,
        fetch_text: bool,
        body_max_bytes: int | None,
    ) -> dict[str, Any]:
        props = list(DEFAULT_EMAIL_PROPERTIES if properties is None else properties)
        if "id" not in props:
            props.insert(0, "id")
        args: dict[str, Any] = {"accountId": account, "properties": props}
        if fetch_text:
            for extra in ("textBody", "bodyValues"):
                if extra not in props:
                    props.append(extra)
            args["fetchTextBodyValues"] = True
            if body_max_bytes is not None:
                if body_max_bytes <= 0:
                    raise ValueError("body_max_bytes must be positive")
                args["maxBodyValueBytes"] = body_max_bytes
        return args

    async def get_emails(
        self,
        ids: Iterable[str],
        *,
        properties: Sequence[str] | None = None,
        fetch_text: bool = False,
        body_max_bytes: int | None = None,
    ) -> list[EmailMeta]:
        """Email/get for `ids`, in the order given (ids the server does not know are left out).

        Ids are chunked by the session's maxObjectsInGet, and the chunks go in as few requests as
        maxCallsInRequest allows (one, normally). With `fetch_text`, `text` holds the text body.
        """
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return []
        session = await self.get_session()
        base = self._get_args(self.account_id, properties, fetch_text, body_max_bytes)
        size = session.max_objects_in_get
        calls: list[MethodCall] = [
            ("Email/get", {**base, "ids": wanted[i : i + size]}, f"g{i // size}")
            for i in range(0, len(wanted), size)
        ]
        found: dict[str, EmailMeta] = {}
        per_request = session.max_calls_in_request
        for start in range(0, len(calls), per_request):
            batch = calls[start : start + per_request]
            responses = await self.call(batch)
            for _name, _args, call_id in batch:
                res = responses.result(call_id, "Email/get")
                for raw in _dicts(res.get("list")):
                    meta = _email_meta(raw, fetch_text, body_max_bytes)
                    if meta is not None:
                        found[meta.id] = meta
        return [found[i] for i in wanted if i in found]

    async def query_and_get(
        self,
        filter: Mapping[str, Any] | None = None,
        sort: Sequence[Mapping[str, Any]] | None = NEWEST_FIRST,
        limit: int = 50,
        *,
        position: int = 0,
        properties: Sequence[str] | None = None,
        fetch_text: bool = False,
        body_max_bytes: int | None = None,
    ) -> EmailPage:
        """Email/query + Email/get (`#ids` back-reference) in one request.

        `limit` is capped at the session's maxObjectsInGet, so one Email/get covers the page.
        """
        session = await self.get_session()
        account = self.account_id
        limit = max(0, min(limit, session.max_objects_in_get))
        query = self._query_args(account, filter, sort, position, limit, False)
        get = self._get_args(account, properties, fetch_text, body_max_bytes)
        get["#ids"] = result_ref("q", "Email/query", "/ids")
        responses = await self.call([("Email/query", query, "q"), ("Email/get", get, "g")])
        q = responses.result("q", "Email/query")
        g = responses.result("g", "Email/get")
        ids = _strs(q.get("ids"))
        by_id = {
            m.id: m
            for m in (_email_meta(raw, fetch_text, body_max_bytes) for raw in _dicts(g.get("list")))
            if m is not None
        }
        return EmailPage(
            ids=ids,
            query_state=str(q.get("queryState", "")),
            total=_int(q.get("total")),
            emails=[by_id[i] for i in ids if i in by_id],
        )

    async def search(self, text: str, limit: int = 10) -> SearchResult:
        """Full-text search, newest first: Email/query {text} + SearchSnippet/get + Email/get
        (subject, preview, from, receivedAt), all in one request via back-references.

        A failing query raises; a failing SearchSnippet/get only leaves `snippets` empty.
        """
        session = await self.get_session()
        account = self.account_id
        limit = max(0, min(limit, session.max_objects_in_get))
        text_filter = {"text": text}
        ids_ref = result_ref("q", "Email/query", "/ids")
        responses = await self.call(
            [
                ("Email/query", self._query_args(
                    account, text_filter, NEWEST_FIRST, 0, limit, False), "q"),
                ("SearchSnippet/get",
                 {"accountId": account, "filter": text_filter, "#emailIds": ids_ref}, "s"),
                ("Email/get", {"accountId": account, "#ids": ids_ref,
                               "properties": ["id", "subject", "preview", "from", "receivedAt"]},
                 "g"),
            ]
        )  # fmt: skip
        q = responses.result("q", "Email/query")
        ids = _strs(q.get("ids"))
        g = responses.result("g", "Email/get")
        by_id = {
            m.id: m
            for m in (_email_meta(r, False, None) for r in _dicts(g.get("list")))
            if m is not None
        }
        snippet_error = responses.error("s")
        snippets: list[SearchSnippet] = []
        if snippet_error is None:
            s = responses.result("s", "SearchSnippet/get")
            snippets = [
                SearchSnippet(
                    email_id=str(item["emailId"]),
                    subject=_opt_str(item.get("subject")),
                    preview=_opt_str(item.get("preview")),
                )
                for item in _dicts(s.get("list"))
                if "emailId" in item
            ]
            order = {email_id: n for n, email_id in enumerate(ids)}
            snippets.sort(key=lambda sn: order.get(sn.email_id, len(order)))
        return SearchResult(
            ids=ids,
            emails=[by_id[i] for i in ids if i in by_id],
            snippets=snippets,
            snippet_error=snippet_error,
        )

    # ------------------------------------------------------------------ push (RFC 8620 §7.2)

    async def push_subscription_create(
        self,
        device_client_id: str,
        url: str,
        types: Sequence[str] | None = None,
        *,
        expires: str | None = None,
        keys: Mapping[str, str] | None = None,
    ) -> PushSubscription:
        """PushSubscription/set create. Session-level: no accountId, only the core capability."""
        sub: dict[str, Any] = {"deviceClientId": device_client_id, "url": url}
        if types is not None:
            sub["types"] = list(types)
        if expires is not None:
            sub["expires"] = expires
        if keys is not None:
            sub["keys"] = dict(keys)
        res = await self._push_set({"create": {"sub": sub}})
        created = res.get("created")
        if isinstance(created, dict) and isinstance(created.get("sub"), dict):
            item = created["sub"]
            if isinstance(item.get("id"), str):
                expiry = item.get("expires", expires)
                return PushSubscription(
                    id=item["id"], expires=expiry if isinstance(expiry, str) else None
                )
        raise self._set_failure(res, "notCreated", "sub", "create")

    async def push_subscription_verify(self, subscription_id: str, verification_code: str) -> None:
        """PushSubscription/set update with the code the server POSTed (PushVerification)."""
        res = await self._push_set(
            {"update": {subscription_id: {"verificationCode": verification_code}}}
        )
        updated = res.get("updated")
        if not (isinstance(updated, dict) and subscription_id in updated):
            raise self._set_failure(res, "notUpdated", subscription_id, "update")

    async def push_subscription_get(self, ids: Sequence[str]) -> PushSubscriptionLookup:
        """PushSubscription/get of `ids` (RFC 8620 §7.2.1: no accountId, no state; the server
        never returns `url` or `keys`). Ids the server does not know come back in `not_found`."""
        res = await self._call_one(
            "PushSubscription/get", {"ids": list(ids), "properties": ["id", "expires"]},
            using=(CORE,),
        )
        found: dict[str, PushSubscription] = {}
        for item in _dicts(res.get("list")):
            sub_id = item.get("id")
            if isinstance(sub_id, str):
                found[sub_id] = PushSubscription(
                    id=sub_id, expires=_opt_str(item.get("expires")),
                    expires_known="expires" in item,
                )
        return PushSubscriptionLookup(found=found, not_found=_strs(res.get("notFound")))

    async def push_subscription_set_expires(self, subscription_id: str, expires: str) -> str:
        """PushSubscription/set update of `expires` (RFC 8620 §7.2.2). The server may choose
        another time and then returns it in `updated`; the answer is the time now in force."""
        res = await self._push_set({"update": {subscription_id: {"expires": expires}}})
        updated = res.get("updated")
        if not (isinstance(updated, dict) and subscription_id in updated):
            raise self._set_failure(res, "notUpdated", subscription_id, "update")
        changed = updated[subscription_id]
        if isinstance(changed, dict) and isinstance(changed.get("expires"), str):
            return str(changed["expires"])
        return expires

    async def push_subscription_destroy(self, subscription_id: str) -> None:
        res = await self._push_set({"destroy": [subscription_id]})
        destroyed = res.get("destroyed")
        if not (isinstance(destroyed, list) and subscription_id in destroyed):
            raise self._set_failure(res, "notDestroyed", subscription_id, "destroy")

    async def _push_set(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return await self._call_one("PushSubscription/set", arguments, using=(CORE,))

    @staticmethod
    def _set_failure(res: Mapping[str, Any], key: str, object_id: str, action: str) -> JmapError:
        failures = res.get(key)
        if isinstance(failures, dict) and isinstance(failures.get(object_id), dict):
            return JmapSetError("PushSubscription/set", object_id, failures[object_id], action)
        return JmapProtocolError(f"PushSubscription/set did not {action} {object_id!r}")


# ---------------------------------------------------------------------------------- parsing


def _email_meta(
    raw: Mapping[str, Any], fetch_text: bool, body_max_bytes: int | None
) -> EmailMeta | None:
    email_id = raw.get("id")
    if not isinstance(email_id, str):
        return None
    text: str | None = None
    truncated = False
    if fetch_text:
        text, truncated = _text_body(raw, body_max_bytes)
    return EmailMeta(
        id=email_id,
        sender=_sender(raw.get("from")),
        subject=_opt_str(raw.get("subject")),
        received_at=_unix(raw.get("receivedAt")),
        mailbox_ids=_true_keys(raw.get("mailboxIds")),
        keywords=_true_keys(raw.get("keywords")),
        preview=_opt_str(raw.get("preview")) or "",
        text=text,
        text_truncated=truncated,
    )


def _text_body(raw: Mapping[str, Any], cap: int | None) -> tuple[str, bool]:
    values = raw.get("bodyValues")
    values = values if isinstance(values, dict) else {}
    chunks: list[str] = []
    truncated = False
    for part in _dicts(raw.get("textBody")):
        value = values.get(part.get("partId"))
        if isinstance(value, dict) and isinstance(value.get("value"), str):
            chunks.append(value["value"])
            truncated = truncated or bool(value.get("isTruncated"))
    text = "\n".join(chunks)
    if cap is not None:
        encoded = text.encode("utf-8")
        if len(encoded) > cap:
            text = encoded[:cap].decode("utf-8", errors="ignore")
            truncated = True
    return text, truncated


def _sender(value: Any) -> str | None:
    for addr in _dicts(value):
        name = _opt_str(addr.get("name"))
        email = _opt_str(addr.get("email"))
        name = name.strip() if name else None
        if name and email:
            return f"{name} <{email}>"
        if email or name:
            return email or name
    return None


def _unix(value: Any) -> int | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp())


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _strs(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _true_keys(value: Any) -> frozenset[str]:
    if not isinstance(value, dict):
        return frozenset()
    return frozenset(k for k, v in value.items() if isinstance(k, str) and v is True)


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _positive_int(value: Any, default: int) -> int:
    n = _int(value)
    return n if n is not None and n > 0 else default


def _req_str(res: Mapping[str, Any], key: str, method: str) -> str:
    value = res.get(key)
    if not isinstance(value, str):
        raise JmapProtocolError(f"{method} response has no {key}")
    return value
