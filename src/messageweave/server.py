"""The HTTP server `run` and `serve` start: uvicorn (httptools when installed, else h11, on uvloop
when installed), with deadlines for slow clients.

uvicorn bounds only the idle time between requests (`timeout_keep_alive`); a client that
trickles its headers or body a byte at a time would hold its connection (and the request's
task) forever. `GuardedHttpToolsProtocol` and `GuardedH11Protocol` (the same rules on uvicorn's
two HTTP/1.1 protocols, `DEFAULT_PROTOCOL` the first one available) add two read deadlines and
close the connection when one passes:

- the request headers must be complete within `header_timeout_s` of the connection opening or
  of the previous response (an opened connection that never sends a byte is closed silently);
- the request body must be complete within `body_timeout_s` of the end of its headers.

Unfinished request headers longer than `max_header_bytes` are answered 400 and the connection
closed (h11 does it itself; `GuardedHttpToolsProtocol` counts them). A request cut off in its
body reaches the app as a client disconnect (logged as 499 by `messageweave.logs.RequestLog`),
preceded by an `event:"slow_client"` line.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools is not installed: h11 serves alone
    HTTPTOOLS = False
else:
    HTTPTOOLS = True

log = logging.getLogger(__name__)

# uvicorn's own answer to a request it cannot parse (h11: also headers past the size limit).
_INVALID_REQUEST = "Invalid HTTP request received."


@dataclass(frozen=True)
class ReadLimits:
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keep_alive_s: int = 5  # uvicorn's timeout_keep_alive: idle time between requests
    max_header_bytes: int = 16 * 1024  # unfinished request line + headers


class GuardedConfig(uvicorn.Config):
    """A uvicorn configuration that carries the read limits to the guarded protocols."""

    def __init__(self, app: ASGIApp, *, limits: ReadLimits,
                 http: type[asyncio.Protocol] | None = None, **kwargs: Any) -> None:
        super().__init__(
            app,
            http=http or DEFAULT_PROTOCOL,
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


class _Deadlines(asyncio.Protocol):
    """The deadline clock both guarded protocols share (placed before uvicorn's protocol class):
    which phase is timed, and closing the connection when its time is up. The headers are timed
    from the connection opening; the protocol calls `_arm`/`_disarm` as requests progress."""

    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport

    def __init__(
        self,
        config: uvicorn.Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)  # type: ignore[call-arg]
        self.limits = config.read_limits if isinstance(config, GuardedConfig) else ReadLimits()
        self._deadline: asyncio.TimerHandle | None = None
        self._phase = ""  # "headers", "body" or "" (no deadline: the app is answering)
        self._bytes_in_phase = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._arm("headers", self.limits.header_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self, phase: str, timeout: float) -> None:
        self._disarm()
        self._phase, self._bytes_in_phase = phase, 0
        self._deadline = self.loop.call_later(timeout, self._expired, phase, timeout)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline, self._phase = None, ""

    def _arm_for_body(self, more_body: bool) -> None:
        """The headers of the request being answered are in: time its body, if it has one."""
        if more_body:
            self._arm("body", self.limits.body_timeout_s)
        else:
            self._disarm()

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


class GuardedH11Protocol(_Deadlines, H11Protocol):
    """uvicorn's h11 protocol with a header deadline and a body deadline (module docstring).
    h11 parses one request at a time: `self.cycle` is always the request being answered."""

    _request: object = None  # the last request whose headers came

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._bytes_in_phase += len(data)
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
            self._arm_for_body(cycle.more_body)
        elif self._phase == "body" and cycle is not None and not cycle.more_body:
            self._disarm()


if HTTPTOOLS:
    class GuardedHttpToolsProtocol(_Deadlines, HttpToolsProtocol):
        """uvicorn's httptools protocol with the same deadlines and header size limit as
        `GuardedH11Protocol`. httptools parses ahead: the headers of a pipelined request can
        come while an earlier one is answered, so the deadlines follow the parser's callbacks;
        a request waiting behind another is timed when it starts."""

        def data_received(self, data: bytes) -> None:
            timing_headers = self._phase == "headers"
            self._bytes_in_phase += len(data)
            super().data_received(data)
            # Still in the headers after this chunk (the parser did not finish them)?
            if (timing_headers and self._phase == "headers"
                    and self._bytes_in_phase > self.limits.max_header_bytes
                    and not self.transport.is_closing()):
                self._disarm()
                self.logger.warning(_INVALID_REQUEST)
                self.send_400_response(_INVALID_REQUEST)

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            if not self.pipeline:  # the request started now (not queued behind another)
                self._arm_for_body(self.cycle.more_body)

        def on_message_complete(self) -> None:
            super().on_message_complete()
            if self._phase == "body" and not self.pipeline:
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()  # may start a pipelined request already received
            if self.transport.is_closing():
                return
            cycle = self.cycle
            if cycle is None or cycle.response_complete:  # nothing started: wait for headers
                self._arm("headers", self.limits.header_timeout_s)
            elif self.pipeline:  # the started request is complete: another one came after it
                self._disarm()
            else:
                self._arm_for_body(cycle.more_body)

    DEFAULT_PROTOCOL: type[asyncio.Protocol] = GuardedHttpToolsProtocol
else:  # pragma: no cover - httptools is a dependency
    DEFAULT_PROTOCOL = GuardedH11Protocol


def serve(app: ASGIApp, host: str, port: int, limits: ReadLimits | None = None) -> None:
    """Serve `app` until SIGINT/SIGTERM; access log off (`RequestLog` writes one line). uvicorn's
    `loop="auto"` runs uvloop when it is installed."""
    config = GuardedConfig(app, limits=limits or ReadLimits(), host=host, port=port,
                           log_config=None, access_log=False)
    uvicorn.Server(config).run()
