"""`SecurityHeaders`: the two headers every answer carries, errors and setup mode included.

- `Cache-Control: no-store`: answers hold sessions, configuration and operational state, and
  nothing here is meant to be kept by a browser or an intermediary;
- `X-Content-Type-Options: nosniff`: a JSON or text answer is never read as HTML or script.

Each is added to `http.response.start` only when the answer did not set it itself: a route with
its own policy keeps it (the static page and assets set both, with more, in `web.static`).
It is the outermost layer (outside `RequestContext`), so the 413 and last-resort 500 that
`RequestContext` answers by itself carry them too.

With `hsts` (the app has `GATEWAY_SECRET`: it is deployed behind the gateway, whose origins
are https only) every answer also carries `HSTS` (issue #23, finding 8). Without it the backend
cannot know it is served over https (the HTTP server speaks plain http and believes no
forwarded scheme), and RFC 6797 §7.2 forbids the header over plain http.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from messageweave.asgi import HttpMiddleware

DEFAULTS: tuple[tuple[bytes, bytes], ...] = (
    (b"cache-control", b"no-store"),
    (b"x-content-type-options", b"nosniff"),
)
HSTS = (b"strict-transport-security", b"max-age=31536000; includeSubDomains")


def with_defaults(headers: list[tuple[bytes, bytes]],
                  defaults: tuple[tuple[bytes, bytes], ...] = DEFAULTS
                  ) -> list[tuple[bytes, bytes]]:
    """`headers` plus each of `defaults` it does not name (names compared case-insensitively)."""
    present = {name.lower() for name, _value in headers}
    return headers + [(name, value) for name, value in defaults if name not in present]


class SecurityHeaders(HttpMiddleware):
    """Pure ASGI middleware adding `DEFAULTS` (and `HSTS` when asked) to every HTTP answer
    that lacks them."""

    def __init__(self, app: ASGIApp, *, hsts: bool = False) -> None:
        super().__init__(app)
        self.defaults = (*DEFAULTS, HSTS) if hsts else DEFAULTS

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        defaults = self.defaults

        async def send_with_defaults(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = with_defaults(list(message.get("headers", [])), defaults)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_defaults)
