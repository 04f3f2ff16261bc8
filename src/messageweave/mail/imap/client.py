"""`ImapClient`: one IMAP connection on asyncio streams: TLS, STARTTLS or (loopback only) none,
the login, one command at a time with a timeout each, and IDLE. The mailbox commands (SELECT,
UID SEARCH / FETCH / STORE / MOVE, APPEND, LIST, STATUS) come from `MailboxCommands`.

- TLS trust: `ssl_context` if given, else `build_ssl_context(ca_pem=...)` as the JMAP client
  builds it (SSL_CERT_FILE / SSL_CERT_DIR, else certifi, plus `ca_pem`). The host name is
  checked. STARTTLS is required when `security="starttls"`: a server that does not offer it is
  an `ImapTlsError`, never a fall-back to plain text.
- Login: AUTHENTICATE PLAIN where the server offers it (UTF-8 safe; SASL-IR used when offered),
  else LOGIN with quoted strings or literals. A refusal is `ImapAuthError`, with the server's
  text and never the password (`__repr__` and every error leave it out).
- Every command runs under one lock and its own timeout (`timeout`, seconds); a timeout, a
  broken connection or a response that is not IMAP closes the connection (its state is then
  unknown) and raises. Untagged responses that arrive while a command runs are its answer.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from messageweave.aio import AsyncClosing
from messageweave.config.checks import is_loopback_host
from messageweave.config.fields import Security  # the wire's imap_security / smtp_security
from messageweave.mail.imap.errors import (
    ImapAuthError,
    ImapCapabilityError,
    ImapCommandError,
    ImapError,
    ImapProtocolError,
    ImapTlsError,
    ImapTransportError,
)
from messageweave.mail.imap.mailbox import MailboxCommands
from messageweave.mail.imap.parser import (
    DEFAULT_LIMITS,
    Continuation,
    Data,
    Limits,
    Response,
    StatusResponse,
    Value,
    parse_response,
    read_response,
)
from messageweave.mail.imap.wire import Literal, Text, WireArg, atom, string
from messageweave.mail.jmap import build_ssl_context

IDLE_EVENTS = frozenset({"EXISTS", "EXPUNGE", "FETCH", "VANISHED"})
T = TypeVar("T")
_LITERAL_PLUS_MAX = 4096  # LITERAL- (RFC 7888) takes non-synchronizing literals up to this


@dataclass(frozen=True)
class Answer:
    """A command's tagged OK and the untagged responses that came with it."""

    status: StatusResponse
    untagged: list[Response]

    def data(self, kind: str) -> list[Data]:
        return [r for r in self.untagged if isinstance(r, Data) and r.kind == kind]

    def code(self, name: str) -> list[Value] | None:
        """The arguments of response code `name` on the tagged or an untagged status."""
        for r in [self.status, *self.untagged]:
            if isinstance(r, StatusResponse) and r.code == name:
                return r.code_args
        return None


CLOSE_WAIT_S = 0.25  # how long a closing connection waits for the server's TLS close_notify


class ImapClient(MailboxCommands, AsyncClosing):
    """One IMAP connection. `async with ImapClient(...) as c:` connects and logs in, and logs
    out on the way out."""

    def __init__(
        self,
        host: str,
        port: int = 993,
        *,
        username: str,
        password: str,
        security: Security = "tls",
        ca_pem: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        timeout: float = 30.0,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        if security not in ("tls", "starttls", "none"):
            raise ValueError("security must be tls, starttls or none")
        if security == "none" and not is_loopback_host(host):
            raise ValueError("IMAP without TLS is allowed only for a loopback host")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self.host, self.port, self.security = host, port, security
        self.username = username
        self._password = password
        self._ca_pem = ca_pem
        self._ssl = ssl_context
        self._timeout = float(timeout)
        self.limits = limits
        self.capabilities: frozenset[str] = frozenset()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()
        self._tags = 0

    def __repr__(self) -> str:
        return (
            f"ImapClient(host={self.host!r}, port={self.port}, security={self.security!r}, "
            f"username={self.username!r})"
        )

    async def __aenter__(self) -> ImapClient:
        await self.connect()
        return self

    def twin(self) -> ImapClient:
        """A new, unconnected client of the same server, user and settings."""
        return ImapClient(self.host, self.port, username=self.username, password=self._password,
                          security=self.security, ca_pem=self._ca_pem, ssl_context=self._ssl,
                          timeout=self._timeout, limits=self.limits)

    @property
    def connected(self) -> bool:
        return self._writer is not None

    # ------------------------------------------------------------------ connection
    async def connect(self) -> None:
        """Open the connection, secure it and log in; `capabilities` are then the server's
        post-login ones."""
        context = self._ssl or build_ssl_context(ca_pem=self._ca_pem)
        try:
            async with asyncio.timeout(self._timeout):
                self._reader, self._writer = await asyncio.open_connection(
                    self.host, self.port, limit=self.limits.max_line + 64,
                    ssl=context if self.security == "tls" else None,
                    server_hostname=self.host if self.security == "tls" else None,
                )  # fmt: skip
                greeting = await self._read()
            if not isinstance(greeting, StatusResponse) or greeting.state not in ("OK", "PREAUTH"):
                raise ImapTransportError(f"the server refused the connection: {greeting}")
            self._take_capabilities(greeting)
            if self.security == "starttls":
                await self._starttls(context)
            if greeting.state != "PREAUTH":
                await self._login()
            if not self.capabilities or "IMAP4REV1" not in self.capabilities:
                await self.capability()
        except ssl.SSLCertVerificationError as exc:
            await self._abort()
            raise ImapTlsError(
                f"{self._where()}: certificate not trusted ({exc.verify_message})"
            ) from None
        except ssl.SSLError as exc:
            await self._abort()
            raise ImapTlsError(f"{self._where()}: TLS failed ({exc.reason or exc})") from None
        except TimeoutError:
            await self._abort()
            raise ImapTransportError(
                f"{self._where()}: no answer within {self._timeout:g} s"
            ) from None
        except OSError as exc:
            await self._abort()
            raise ImapTransportError(f"{self._where()}: {exc.strerror or exc!r}") from None
        except BaseException:
            await self._abort()
            raise

    async def _starttls(self, context: ssl.SSLContext) -> None:
        if not self.capabilities:
            await self.capability()
        if "STARTTLS" not in self.capabilities:
            raise ImapTlsError(f"{self._where()}: the server does not offer STARTTLS")
        await self._run("STARTTLS")
        assert self._writer is not None
        async with asyncio.timeout(self._timeout):
            await self._writer.start_tls(context, server_hostname=self.host)
        self.capabilities = frozenset()  # RFC 9051 §6.2.1: forget what was said in plain text

    async def _login(self) -> None:
        if "AUTH=PLAIN" in self.capabilities:
            token = base64.b64encode(
                b"\0" + self.username.encode() + b"\0" + self._password.encode()
            )
            sasl_ir = "SASL-IR" in self.capabilities
            args = (b"PLAIN", token) if sasl_ir else (b"PLAIN",)
            coro = self._run("AUTHENTICATE", *args, respond=None if sasl_ir else token)
        elif "LOGINDISABLED" in self.capabilities:
            raise ImapAuthError(f"{self._where()}: the server offers no login over this connection")
        else:
            coro = self._run("LOGIN", string(Text(self.username)), string(Text(self._password)))
        try:
            answer = await coro
        except ImapCommandError as exc:
            if exc.state != "NO":
                raise
            text = exc.text.replace(self._password, "***") if self._password else exc.text
            raise ImapAuthError(
                f"{self._where()}: the server refused the login of {self.username!r}: {text}"
            ) from None
        self._take_capabilities(answer.status)

    def _take_capabilities(self, status: StatusResponse) -> None:
        if status.code == "CAPABILITY":
            self.capabilities = frozenset(str(a).upper() for a in status.code_args)

    def _where(self) -> str:
        return f"IMAP {self.host}:{self.port}"

    async def aclose(self) -> None:
        """LOGOUT (briefly waited for) and close; never raises."""
        if self._writer is None:
            return
        try:
            async with asyncio.timeout(min(self._timeout, 5.0)):
                await self._run("LOGOUT")
        except (ImapError, TimeoutError, OSError):
            pass
        await self._abort()

    async def _abort(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is None:
            return
        writer.close()
        try:
            # A TLS close waits for the server's close_notify, which some servers (Cyrus) never
            # send: every stop of the service took 2 s per connection. Nothing more is owed to
            # a server after LOGOUT (or after a failure): the transport is dropped.
            async with asyncio.timeout(CLOSE_WAIT_S):
                await writer.wait_closed()
        except (OSError, TimeoutError, ssl.SSLError):
            writer.transport.abort()

    # ------------------------------------------------------------------ simple commands
    async def capability(self) -> frozenset[str]:
        answer = await self._run("CAPABILITY")
        for data in answer.data("CAPABILITY"):
            self.capabilities = frozenset(str(v).upper() for v in data.values)
        return self.capabilities

    async def enable(self, *extensions: str) -> frozenset[str]:
        """ENABLE (RFC 5161), e.g. `enable("CONDSTORE", "QRESYNC")`: what the server enabled."""
        if "ENABLE" not in self.capabilities:
            raise ImapCapabilityError(f"{self._where()}: no ENABLE")
        answer = await self._run("ENABLE", *(atom(e) for e in extensions))
        return frozenset(str(v).upper() for d in answer.data("ENABLED") for v in d.values)

    async def noop(self) -> list[Response]:
        """NOOP: the untagged news (EXISTS, EXPUNGE, FETCH) since the last command."""
        return (await self._run("NOOP")).untagged

    async def idle(self, wait: float) -> list[Data]:
        """IDLE until the mailbox changes (EXISTS, EXPUNGE, FETCH, VANISHED) or `wait`
        seconds pass, then DONE. Returns the changes, [] after a quiet `wait`."""
        if "IDLE" not in self.capabilities:
            raise ImapCapabilityError(f"{self._where()}: the server does not offer IDLE")
        async with self._lock:
            return await self._guarded("IDLE", self._idle(wait))

    async def _idle(self, wait: float) -> list[Data]:
        tag = self._next_tag()
        events: list[Data] = []
        async with asyncio.timeout(self._timeout):
            await self._write(tag.encode() + b" IDLE\r\n")
            while not isinstance(reply := await self._read(), Continuation):
                self._check_reply(reply, tag, "IDLE")
                events.extend(_events([reply]))
        try:
            async with asyncio.timeout(None if events else wait):
                while not events:
                    reply = await self._read()
                    self._check_reply(reply, tag, "IDLE")
                    events.extend(_events([reply]))
        except TimeoutError:
            pass
        async with asyncio.timeout(self._timeout):
            await self._write(b"DONE\r\n")
            answer = await self._collect(tag, "IDLE")
        return events + _events(answer.untagged)

    # ------------------------------------------------------------------ the command loop
    def _next_tag(self) -> str:
        self._tags += 1
        return f"mw{self._tags}"

    async def _run(self, name: str, *args: WireArg, respond: bytes | None = None) -> Answer:
        """Send one command (arguments already encoded by `wire`), wait for its tagged answer.
        `respond` answers one `+` continuation (AUTHENTICATE without SASL-IR)."""
        async with self._lock:
            return await self._guarded(name, self._exchange(name, args, respond))

    async def _guarded(self, name: str, exchange: Coroutine[Any, Any, T]) -> T:
        """Run an exchange on the connection; whatever leaves it in an unknown state (a
        timeout, a broken connection, garbage, a cancellation) closes the connection."""
        if self._writer is None:
            exchange.close()
            raise ImapTransportError(f"{self._where()}: not connected")
        try:
            async with asyncio.timeout(None if name == "IDLE" else self._timeout):
                return await exchange
        except TimeoutError:
            await self._abort()
            raise ImapTransportError(
                f"{self._where()}: {name} got no answer within {self._timeout:g} s"
            ) from None
        except (OSError, ssl.SSLError) as exc:
            await self._abort()
            raise ImapTransportError(f"{self._where()}: {name} failed: {exc!r}") from None
        except (ImapTransportError, ImapProtocolError):
            await self._abort()
            raise
        except ImapError:
            raise
        except BaseException:
            await self._abort()
            raise

    async def _exchange(
        self, name: str, args: tuple[WireArg, ...], respond: bytes | None
    ) -> Answer:
        tag = self._next_tag()
        line = tag.encode() + b" " + b" ".join(atom(word) for word in name.split(" "))
        for arg in args:
            line += b" "
            if not isinstance(arg, Literal):
                line += arg
                continue
            size = len(arg.data)
            if "LITERAL+" in self.capabilities or (
                "LITERAL-" in self.capabilities and size <= _LITERAL_PLUS_MAX
            ):
                line += b"{%d+}\r\n" % size + arg.data
                continue
            await self._write(line + b"{%d}\r\n" % size)
            line = b""
            while not isinstance(reply := await self._read(), Continuation):
                if isinstance(reply, StatusResponse) and reply.tag == tag:
                    raise ImapCommandError(name, reply.state, reply.text, reply.code)
                self._check_reply(reply, tag, name)
            line = arg.data
        await self._write(line + b"\r\n")
        return await self._collect(tag, name, respond)

    async def _collect(self, tag: str, name: str, respond: bytes | None = None) -> Answer:
        untagged: list[Response] = []
        while True:
            reply = await self._read()
            if isinstance(reply, Continuation) and respond is not None:
                await self._write(respond + b"\r\n")
                respond = b"*"  # a second challenge: cancel (RFC 9051 §6.2.2)
                continue
            if isinstance(reply, StatusResponse) and reply.tag == tag:
                if reply.state != "OK":
                    raise ImapCommandError(name, reply.state, reply.text, reply.code)
                return Answer(reply, untagged)
            self._check_reply(reply, tag, name)
            untagged.append(reply)

    def _check_reply(self, reply: Response, tag: str, name: str) -> None:
        """An untagged reply is fine; anything else here is not this conversation."""
        if isinstance(reply, Continuation):
            raise ImapProtocolError(f"{name}: an unexpected continuation request")
        if isinstance(reply, StatusResponse) and reply.tag is not None:
            raise ImapProtocolError(f"{name}: an answer to tag {reply.tag!r}, not {tag!r}")
        if isinstance(reply, StatusResponse) and reply.state == "BYE" and name != "LOGOUT":
            raise ImapTransportError(f"{self._where()}: the server said goodbye: {reply.text}")

    async def _read(self) -> Response:
        if self._reader is None:
            raise ImapTransportError(f"{self._where()}: not connected")
        return parse_response(await read_response(self._reader, self.limits), self.limits)

    async def _write(self, data: bytes) -> None:
        if self._writer is None:
            raise ImapTransportError(f"{self._where()}: not connected")
        self._writer.write(data)
        await self._writer.drain()


def _events(replies: list[Response]) -> list[Data]:
    return [r for r in replies if isinstance(r, Data) and r.kind in IDLE_EVENTS]

