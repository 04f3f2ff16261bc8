"""The gateway's signature (issue #23, reference §3.3, §3.4): with `GATEWAY_SECRET` set, a
backend serves only requests the gateway forwarded.

The Worker (`gateway/src/signature.js`) adds to every forwarded request

    x-mw-gateway-signature: t=<Unix seconds>,v1=<64 lowercase hex>

where `v1` = HMAC-SHA256(GATEWAY_SECRET, "<t>\\n<METHOD>\\n<path?query>\\n<x-mw-client-ip>"):
the method as sent, the path and query exactly as they arrive (`raw_path`, `?` and the query
string when there is one), and the client address the gateway set ("" when none). Signing the
address is what makes `x-mw-client-ip` believable: a request whose address was changed no
longer matches.

`GatewaySignature` refuses, with 403 `gateway_signature_invalid`, every request whose signature
is missing, malformed, more than `MAX_SKEW_S` = 60 s away from this host's clock, or not
the HMAC of what arrived (compared in constant time). `UNSIGNED_PATHS` (`/healthz`, the
platform's liveness probe and the gateway's own probe) stay open. A signed request is marked
(`SIGNED`) so that `api.credentials.client_address` believes the client-address header on it only.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from messageweave.asgi import HttpMiddleware
from messageweave.errors import envelope

SIGNATURE_HEADER = "x-mw-gateway-signature"
CLIENT_IP_HEADER = "x-mw-client-ip"  # what the gateway sets (gateway/src/forward.js)
MAX_SKEW_S = 60
UNSIGNED_PATHS = frozenset({"/healthz"})
CODE = "gateway_signature_invalid"
SIGNED = "messageweave.gateway_signed"  # scope key: the gateway signed this request
_SIGNATURE = re.compile(rb"t=([0-9]{1,12}),v1=([0-9a-f]{64})")


def signed_text(t: int, method: bytes, target: bytes, client_ip: bytes) -> bytes:
    """What the signature covers; no part can hold a line break (a method is a token, a
    target and a header value cannot carry one)."""
    return b"\n".join((str(t).encode(), method, target, client_ip))


def _mac(secret: str, text: bytes) -> str:
    return hmac.new(secret.encode(), text, hashlib.sha256).hexdigest()


def sign(secret: str, t: int, method: str, target: str, client_ip: str = "") -> str:
    """The header value the gateway sends for this request (`target` = path?query)."""
    text = signed_text(t, method.encode(), target.encode(), client_ip.encode())
    return f"t={t},v1={_mac(secret, text)}"


def signature_headers(secret: str, method: str, target: str) -> dict[str, str]:
    """The signature of a request made now, without a client address: for an operator's own
    call to one backend (`messageweave bootstrap`)."""
    return {SIGNATURE_HEADER: sign(secret, int(time.time()), method, target)}


def _header(scope: Scope, name: bytes) -> bytes | None:
    """The field's value; several fields of one name are joined as HTTP does (", "), so an
    extra one breaks the signature instead of slipping past it."""
    values = [value for key, value in scope.get("headers", []) if key.lower() == name]
    return b", ".join(values) if values else None


def target_of(scope: Scope) -> bytes:
    """The request target as it arrived: path (undecoded) and the query when there is one."""
    raw: bytes = scope.get("raw_path") or scope["path"].encode()
    query: bytes = scope.get("query_string", b"")
    return raw + b"?" + query if query else raw


def verify(secret: str, scope: Scope, now: int) -> bool:
    header = _header(scope, SIGNATURE_HEADER.encode())
    found = _SIGNATURE.fullmatch(header) if header is not None else None
    if found is None:
        return False
    t = int(found.group(1))
    if abs(now - t) > MAX_SKEW_S:
        return False
    text = signed_text(t, scope["method"].encode(), target_of(scope),
                       _header(scope, CLIENT_IP_HEADER.encode()) or b"")
    return hmac.compare_digest(_mac(secret, text).encode(), found.group(2))


def is_signed(scope: Scope) -> bool:
    return scope.get(SIGNED) is True


class GatewaySignature(HttpMiddleware):
    """Pure ASGI middleware: only requests the gateway signed (or `UNSIGNED_PATHS`) go on."""

    def __init__(self, app: ASGIApp, secret: str,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(app)
        self.secret = secret
        self.clock = clock

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if verify(self.secret, scope, int(self.clock())):
            scope[SIGNED] = True
        elif scope["path"] not in UNSIGNED_PATHS:
            await envelope(scope, 403, CODE)(scope, receive, send)
            return
        await self.app(scope, receive, send)
