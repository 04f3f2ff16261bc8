"""A loopback SMTP sink (aiosmtpd): the outside world a reply is sent to (issue #25).

Cyrus relays `EmailSubmission/set` to it (`smtp_backend: host`, `smtp_host:
127.0.0.1:PORT/noauth`, written by `tests/peers/cyrus.py` when given `smtp_host`). It accepts
every message, keeps the envelope and the raw bytes in memory, and lets a test wait for them
(`wait_for`) without sleeping: a `threading.Condition` is notified on every message, since
aiosmtpd's controller runs its own event loop in a thread.

`SubmissionSink` (issue #33) is the submission server an IMAP mailbox's replies are sent
through (`mail.smtp`): two listeners, implicit TLS (`tls_port`) and STARTTLS (`starttls_port`,
required before anything else), both with AUTH PLAIN / LOGIN required over TLS against its
`users`, with a throw-away CA (`ca_pem`, from the Cyrus harness's `_make_test_pki`). Each
message records the user that authenticated (`Received.auth_user`).
"""

from __future__ import annotations

import contextlib
import email
import email.policy
import logging
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from tests.peers.cyrus import _make_test_pki

HOST = "127.0.0.1"
REFUSED_DOMAIN = "refused.example"  # `SubmissionSink` refuses its recipients


@dataclass(frozen=True)
class Received:
    """One message the sink accepted."""

    mail_from: str
    rcpt_tos: tuple[str, ...]
    raw: bytes
    auth_user: str | None = None  # who authenticated (`SubmissionSink`); None without AUTH

    @property
    def message(self) -> EmailMessage:
        parsed = email.message_from_bytes(self.raw, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        return parsed

    def body_text(self) -> str:
        part = self.message.get_body(("plain",))
        return "" if part is None else str(part.get_content())  # type: ignore[attr-defined]


@dataclass
class SmtpSink:
    """The messages received, oldest first; `port` once started."""

    received: list[Received] = field(default_factory=list)
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _controller: Controller | None = None

    @property
    def port(self) -> int:
        assert self._controller is not None, "the sink is not started"
        return int(self._controller.port)

    @property
    def smtp_host(self) -> str:
        """`smtp_host` for Cyrus's imapd.conf: `host:port/noauth` (no SMTP AUTH)."""
        return f"{HOST}:{self.port}/noauth"

    def start(self) -> None:
        # aiosmtpd logs every line of every message at DEBUG (logger `mail.log`): that is the
        # outside world's copy, not ours, and would drown a test that scans our logs.
        logging.getLogger("mail.log").setLevel(logging.WARNING)
        self._controller = Controller(_Handler(self), hostname=HOST, port=_free_port(),
                                      ready_timeout=10)
        self._controller.start()

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    def add(self, received: Received) -> None:
        with self._cond:
            self.received.append(received)
            self._cond.notify_all()

    def matching(self, match: Callable[[Received], bool]) -> list[Received]:
        with self._cond:
            return [r for r in self.received if match(r)]

    def wait_for(self, match: Callable[[Received], bool], count: int = 1,
                 timeout_s: float = 15.0) -> list[Received]:
        """Block until `count` received messages match; those messages (AssertionError at
        the timeout). Blocking: call it through `asyncio.to_thread` from a coroutine."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                found = [r for r in self.received if match(r)]
                if len(found) >= count:
                    return found
                left = deadline - time.monotonic()
                assert left > 0, f"{len(found)} of {count} messages reached the SMTP sink"
                self._cond.wait(left)


@dataclass
class SubmissionSink(SmtpSink):
    """A submission server: AUTH required over TLS, implicit (`tls_port`) or by STARTTLS
    (`starttls_port`). `users` maps a login to its password."""

    users: dict[str, str] = field(default_factory=dict)
    ca_pem: str = ""
    _listeners: dict[str, Controller] = field(default_factory=dict)

    @property
    def tls_port(self) -> int:
        return int(self._listeners["tls"].port)

    @property
    def starttls_port(self) -> int:
        return int(self._listeners["starttls"].port)

    def start(self) -> None:
        # ERROR: aiosmtpd also warns at every connection of the implicit-TLS listener (below).
        logging.getLogger("mail.log").setLevel(logging.ERROR)
        ca_pem, cert_pem, key_pem = _make_test_pki()
        self.ca_pem = ca_pem.decode()
        with tempfile.TemporaryDirectory() as tmp:  # load_cert_chain reads files only
            cert, key = Path(tmp, "cert.pem"), Path(tmp, "key.pem")
            cert.write_bytes(cert_pem)
            key.write_bytes(key_pem)
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(cert, key)
        auth = {"authenticator": self._authenticate, "auth_required": True}
        # aiosmtpd counts only STARTTLS as TLS for `auth_require_tls`: on the implicit-TLS
        # listener (every byte is TLS, `ssl_context`) it would never offer AUTH.
        self._listeners["tls"] = Controller(
            _SubmissionHandler(self), hostname=HOST, port=_free_port(), ready_timeout=10,
            ssl_context=context, auth_require_tls=False, **auth)
        self._listeners["starttls"] = Controller(
            _SubmissionHandler(self), hostname=HOST, port=_free_port(), ready_timeout=10,
            tls_context=context, require_starttls=True, auth_require_tls=True, **auth)
        for listener in self._listeners.values():
            listener.start()

    def stop(self) -> None:
        for listener in self._listeners.values():
            listener.stop()
        self._listeners.clear()

    def _authenticate(self, server: SMTP, session: Session, envelope: Envelope,
                      mechanism: str, auth_data: Any) -> AuthResult:
        if not isinstance(auth_data, LoginPassword):
            return AuthResult(success=False, handled=False)
        login = auth_data.login.decode("utf-8", "replace")
        password = auth_data.password.decode("utf-8", "replace")
        if self.users.get(login) != password:
            return AuthResult(success=False, handled=False)
        return AuthResult(success=True, auth_data=login)


class _Handler:
    def __init__(self, sink: SmtpSink) -> None:
        self._sink = sink

    async def handle_DATA(self, server: SMTP, session: Session,  # aiosmtpd calls it so
                          envelope: Envelope) -> str:
        content: Any = envelope.original_content or envelope.content or b""
        raw = content if isinstance(content, bytes) else str(content).encode()
        user = session.auth_data if isinstance(session.auth_data, str) else None
        self._sink.add(Received(str(envelope.mail_from), tuple(envelope.rcpt_tos), raw, user))
        return "250 OK"


class _SubmissionHandler(_Handler):
    """Refuses every recipient at `REFUSED_DOMAIN` (550), as a server refuses an unknown
    user: what a refused recipient looks like to the submitting client."""

    async def handle_RCPT(self, server: SMTP, session: Session, envelope: Envelope,
                          address: str, rcpt_options: list[str]) -> str:
        if address.lower().endswith("@" + REFUSED_DOMAIN):
            return "550 5.1.1 no such user"
        envelope.rcpt_tos.append(address)
        return "250 OK"


def _free_port() -> int:
    """A port of our own: the controller connects to its `port` to check it is up, so 0 (any
    port) does not work."""
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="session")
def smtp_sink() -> Iterator[SmtpSink]:
    """One sink for the test session."""
    sink = SmtpSink()
    sink.start()
    try:
        yield sink
    finally:
        sink.stop()


@contextlib.contextmanager
def running_submission() -> Iterator[SubmissionSink]:
    """A submission server (users are added by the tests), stopped afterwards."""
    sink = SubmissionSink()
    sink.start()
    try:
        yield sink
    finally:
        sink.stop()
