"""The errors the JMAP client raises, one class per failure (RFC 8620 §3.6).

`JmapTransportError` (network, timeout, HTTP 5xx/429), `JmapAuthError` (401/403),
`JmapProtocolError` (not valid JMAP), `JmapRequestError` (request-level problem JSON),
`JmapMethodError` with one subclass per RFC method-level error type, and `JmapSetError` for a
refused create/update/destroy. None of them carries the password. Each is a
`mail.errors.MailError`, and the ones the pipeline tells apart are also the source-neutral
kind: `JmapTransportError` and `ServerUnavailable` a `MailUnreachable`, `JmapAuthError` a
`MailAuthError`, `JmapSetError` a `MailRefused`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from messageweave.mail.errors import MailAuthError, MailError, MailRefused, MailUnreachable


class JmapError(MailError):
    """Base of every error this client raises."""

    source: ClassVar[str] = "jmap"


class JmapTransportError(JmapError, MailUnreachable):
    """The server could not be reached or failed: network error, timeout, HTTP 5xx or 429."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class JmapAuthError(JmapError, MailAuthError):
    """The server refused the credentials (HTTP 401 or 403)."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class JmapProtocolError(JmapError):
    """The server answered something that is not valid JMAP (wrong status, not JSON, ...)."""


class JmapOffOriginError(JmapProtocolError):
    """A URL the session names (`apiUrl`, `downloadUrl`, `eventSourceUrl`, …) is not on the
    session's origin: refused, since the credentials would go there too."""


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


class ServerUnavailable(JmapMethodError, MailUnreachable):
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


class JmapSetError(JmapError, MailRefused):
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

    @property
    def reason(self) -> str:
        return self.type
