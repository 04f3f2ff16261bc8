"""`SecurityHeaders`: the two headers every answer carries, errors and setup mode included.

- `Cache-Control: no-store`: answers hold sessions, configuration and operational state, and
  nothing here is meant to be kept by a browser or an intermediary;
- `X-Content-Type-Options: nosniff`: a JSON or text answer is never read as HTML or script.

Each is added to `http.response.start` only when the answer did not set it itself: a route with
its own policy keeps it (the static page and assets set both, with more, in `web.static`).
It is the outermost layer (outside `RequestContext`), so the 413 and last-resort 500 that
`RequestContext` answers by itself carry them too.
"""

from __future__ import annotations

from starlette.types import Message, Receive, Scope, Send

from messageweave.errors import HttpMiddleware

DEFAULTS: tuple[tuple[bytes, bytes], ...] = (
    (b"cache-control", b"no-store"),
    (b"x-content-type-options", b"nosniff"),
)


def with_defaults(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """`headers` plus each of `DEFAULTS` it does not name (names compared case-insensitively)."""
    present = {name.lower() for name, _value in headers}
    return headers + [(name, value) for name, value in DEFAULTS if name not in present]


class SecurityHeaders(HttpMiddleware):
    """Pure ASGI middleware adding `DEFAULTS` to every HTTP answer that lacks them."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_defaults(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": with_defaults(list(message.get("headers", [])))}
            await send(message)

        await self.app(scope, receive, send_with_defaults)
