"""The HTTP server `run` and `serve` start: uvicorn (h11), with deadlines for slow clients.

uvicorn bounds only the idle time between requests (`timeout_keep_alive`); a client that
trickles its headers or body a byte at a time would hold its connection (and the request's
task) forever. `GuardedH11Protocol` adds two read deadlines and closes the connection when one
passes:

- the request headers must be complete within `header_timeout_s` of the connection opening or
  of the previous response (an opened connection that never sends a byte is closed silently);
- the request body must be complete within `body_timeout_s` of the end of its headers.

A request cut off in its body reaches the app as a client disconnect (logged as 499 by
`messageweave.logs.RequestLog`), preceded by an `event:"slow_client"` line.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle
from uvicorn.server import ServerState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReadLimits:
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keep_alive_s: int = 5  # uvicorn's timeout_keep_alive: idle time between requests
    max_header_bytes: int = 16 * 1024  # h11_max_incomplete_event_size: request line + headers


class GuardedConfig(uvicorn.Config):
    """A uvicorn configuration that carries the read limits to `GuardedH11Protocol`."""

    def __init__(self, app: ASGIApp, *, limits: ReadLimits, **kwargs: Any) -> None:
        super().__init__(
            app,
            http=GuardedH11Protocol,
            ws="none",  # no WebSocket routes; an upgrade would also escape the deadlines
            timeout_keep_alive=limits.keep_alive_s,
            h11_max_incomplete_event_size=limits.max_header_bytes,
            # The client address is the socket peer, or the one header TRUSTED_PROXY_HEADER
            # names (api/throttle.py): uvicorn must not rewrite it from a client-sent
            # X-Forwarded-For because the peer is loopback (its default).
            proxy_headers=False,
            **kwargs,
        )
        self.read_limits = limits


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header deadline and a body deadline (module docstring)."""

    def __init__(
        self,
        config: uvicorn.Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits = config.read_limits if isinstance(config, GuardedConfig) else ReadLimits()
        self._deadline: asyncio.TimerHandle | None = None
        self._phase = ""  # "headers", "body" or "" (no deadline: the app is answering)
        self._bytes_in_phase = False
        self._request: RequestResponseCycle | None = None  # the last request whose headers came

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm("headers", self.limits.header_timeout_s)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._bytes_in_phase = True
        self._follow_request()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # may start a pipelined request already received
        if not self.transport.is_closing():
            self._arm("headers", self.limits.header_timeout_s)
            self._follow_request()

    def _follow_request(self) -> None:
        """Headers in: the body deadline (or none, without a body). Body in: no deadline."""
        cycle = self.cycle
        if cycle is not None and cycle is not self._request:
            self._request = cycle
            if cycle.more_body:
                self._arm("body", self.limits.body_timeout_s)
            else:
                self._disarm()
        elif self._phase == "body" and cycle is not None and not cycle.more_body:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self, phase: str, timeout: float) -> None:
        self._disarm()
        self._phase, self._bytes_in_phase = phase, False
        self._deadline = self.loop.call_later(timeout, self._expired, phase, timeout)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline, self._phase = None, ""

    def _expired(self, phase: str, timeout: float) -> None:
        self._deadline, self._phase = None, ""
        if self.transport.is_closing():
            return
        if phase == "body" or self._bytes_in_phase:
            log.info("slow client: request %s not received within %g s, connection closed",
                     phase, timeout,
                     extra={"fields": {"event": "slow_client", "phase": phase,
                                       "timeout_s": timeout}})
        self.transport.close()


def serve(app: ASGIApp, host: str, port: int, limits: ReadLimits | None = None) -> None:
    """Serve `app` until SIGINT/SIGTERM; access log off (`RequestLog` writes one line)."""
    config = GuardedConfig(app, limits=limits or ReadLimits(), host=host, port=port,
                           log_config=None, access_log=False)
    uvicorn.Server(config).run()
