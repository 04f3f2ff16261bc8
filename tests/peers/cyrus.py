"""A real JMAP server for tests: Debian's Cyrus IMAP 3.6 on 127.0.0.1, in a private directory.

`CyrusServer(base_dir)` writes its own `imapd.conf` / `cyrus.conf`, a throw-away CA plus a server
certificate, a private sasldb with the test users, then runs `cyrmaster` in the foreground (our
child process) with these listeners, all bound to 127.0.0.1 on free ports:

- HTTPS JMAP (`session_url`, verified with `ca_file`) and plain HTTP JMAP (`http_session_url`)
- IMAP (LOGIN without TLS), used to put mail in place (`append`, `set_flags`, `move`)
- LMTP without authentication (`lmtpd -a`), used by `deliver`

With `smtp_host`, JMAP EmailSubmission relays to that SMTP server (`tests/peers/smtp.py`'s sink).

A rolling squatter keeps the Xapian index nearly current; `index()` runs it synchronously so
text queries and SearchSnippet/get see every message. Start-up (and a restart) takes about half a
second on an idle machine, up to about a second under load.
Runs as root (Cyrus drops to the `cyrus` user) or as any other user (then `cyrus_user` is set
to that user).

The packages come from `scripts/install-test-packages.sh`. When they are missing, `start()` raises
`CyrusNotInstalled`, whose message says to run that script; the pytest fixtures turn this into a
failure, never a skip.

A watchdog process stops the instance if the test process dies without `stop()` (killed by a
CI timeout, say), so no Cyrus outlives its test run.

Cyrus logs to syslog only; this harness does not take over /dev/log. When start-up fails, the
error carries the tail of `master.log` (cyrmaster's own stdout/stderr).

EventSource push (RFC 8620 §7.3) needs a patched copy of httpd. Debian builds Cyrus without
wslay (WebSocket), and Cyrus 3.6 reads `jmap_pushpoll` only inside `if (ws_enabled)` in
`http_jmap.c:jmap_init()`. So with the stock binary `jmap_push_poll` stays 0, and the session's
`eventSourceUrl` always answers `204 No Content`. By default (`eventsource=True`) the harness
writes a byte-patched COPY of `/usr/lib/cyrus/bin/httpd` to `<base_dir>/bin/httpd-eventsource`.
The package's file is never touched. Both JMAP listeners (HTTP and HTTPS) run that copy, with
`jmap_pushpoll` set to `push_poll` seconds (default 1). The patch changes two spots in
`jmap_init()`, which it finds by a unique byte pattern (`patch_httpd_for_eventsource`):

1. The `je` after `test ws_enabled` becomes a 6-byte NOP, so `jmap_pushpoll` is always read.
2. Right after the store to `jmap_push_poll` it writes `pop %rbx; ret`, the function's own
   epilogue. The WebSocket capability is then not advertised, and the session JSON is the
   stock one.

If the pattern is not found (another Cyrus build), `start()` raises `CyrusError`, so tests fail
and are never skipped. It does not raise when the caller passed `eventsource=False`; then the
stock httpd runs and `eventSourceUrl` answers 204. After start-up the harness checks that
EventSource answers 200. The patch is computed once per process for each stock binary sha256.
Writing the copy takes a few milliseconds, and a restart reuses it.

The data stays in `base_dir` across `stop()` / `start()`: the users, the mail, the TLS files
and the ports. So `restart()` (or `with srv.stopped(): ...`, during which Cyrus is unreachable)
lets a test bounce the server while a client is connected. `stop()` returns only once every
process of the instance is gone, and so every listening socket with it. `start()` waits until
each port can be bound with SO_REUSEADDR, which is what cyrmaster uses. Connections left in
TIME_WAIT therefore do not hold it up.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import email.utils
import grp
import hashlib
import imaplib
import json
import os
import pwd
import re
import shutil
import signal
import smtplib
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from base64 import b64encode
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.policy import SMTP
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
REALM = "localhost"  # = servername; sasldb entries are user@localhost
CYRUS_LIBEXEC = Path("/usr/lib/cyrus/bin")
MASTER = Path("/usr/sbin/cyrmaster")
SASLPASSWD2 = Path("/usr/sbin/saslpasswd2")
REQUIRED_BINARIES = (
    MASTER,
    SASLPASSWD2,
    CYRUS_LIBEXEC / "httpd",  # package cyrus-caldav
    CYRUS_LIBEXEC / "imapd",
    CYRUS_LIBEXEC / "lmtpd",
    CYRUS_LIBEXEC / "squatter",
    CYRUS_LIBEXEC / "ctl_cyrusdb",
    CYRUS_LIBEXEC / "idled",
)
INSTALL_HINT = (
    "run `sudo scripts/install-test-packages.sh` (Debian/Ubuntu: installs Cyrus IMAP with JMAP)"
)
SPECIAL_FOLDERS = ("Drafts", "Sent", "Trash", "Junk", "Archive")


class CyrusError(RuntimeError):
    """The test Cyrus could not be started or driven."""


class CyrusNotInstalled(CyrusError):
    """Cyrus binaries are missing on this machine."""


# ---------------------------------------------------------------------- EventSource patch

STOCK_HTTPD = CYRUS_LIBEXEC / "httpd"
PATCHED_HTTPD_NAME = "httpd-eventsource"
# jmap_init():  mov (%rax),%eax ; test %eax,%eax ; je <epilogue> ;
#               mov $'s',%esi ; mov $IMAPOPT_JMAP_PUSHPOLL,%edi ; call config_getduration
_PUSHPOLL_BRANCH = re.compile(
    rb"\x8b\x00\x85\xc0\x0f\x84(....)\xbe\x73\x00\x00\x00\xbf..\x00\x00\xe8", re.S
)
# mov %edx,(%rax) [the store to jmap_push_poll] ; lea <"wss:/jmap/ws/">(%rip),%rdx
_PUSHPOLL_STORE = b"\x89\x10\x48\x8d\x15"
_NOP6 = b"\x66\x0f\x1f\x44\x00\x00"  # nopw 0x0(%rax,%rax,1)
_POP_RBX_RET = b"\x5b\xc3"
_patched: dict[str, bytes] = {}  # sha256 of a stock httpd -> its patched bytes


def patch_httpd_for_eventsource(stock: bytes) -> bytes:
    """The bytes of an httpd whose `jmap_init()` reads `jmap_pushpoll` without wslay.

    Raises `CyrusError` unless the expected code is found exactly once: the branch on
    `ws_enabled`, whose target is the `pop %rbx; ret` epilogue, and, within 120 bytes after it,
    the store to `jmap_push_poll`. Checked against Debian 12's cyrus-caldav 3.6.1 (amd64)."""
    hits = list(_PUSHPOLL_BRANCH.finditer(stock))
    if len(hits) != 1:
        raise CyrusError(
            f"EventSource patch: the jmap_init() pushpoll branch was found {len(hits)} times "
            "(expected once): not the Cyrus 3.6 httpd this harness knows"
        )
    at = hits[0].start()
    je_end = at + 10
    target = je_end + int.from_bytes(hits[0].group(1), "little", signed=True)
    if stock[target : target + 2] != _POP_RBX_RET:
        raise CyrusError(
            f"EventSource patch: the ws_enabled branch at {at:#x} does not jump to "
            "`pop %rbx; ret`; refusing to patch an unknown build"
        )
    store = stock.find(_PUSHPOLL_STORE, je_end, at + 120)
    if store < 0:
        raise CyrusError(
            f"EventSource patch: no store to jmap_push_poll after {at:#x}; unknown build"
        )
    patched = bytearray(stock)
    patched[at + 4 : je_end] = _NOP6
    patched[store + 2 : store + 9] = _POP_RBX_RET + b"\x90" * 5
    return bytes(patched)


def _patched_httpd(stock_path: Path) -> tuple[str, bytes]:
    """(sha256 of the stock binary, patched bytes), patched once per process and binary."""
    try:
        stock = stock_path.read_bytes()
    except OSError as exc:
        raise CyrusError(f"cannot read {stock_path} to patch it for EventSource: {exc}") from exc
    sha = hashlib.sha256(stock).hexdigest()
    if sha not in _patched:
        try:
            _patched[sha] = patch_httpd_for_eventsource(stock)
        except CyrusError as exc:
            raise CyrusError(
                f"{stock_path} (sha256 {sha}): {exc}. Pass eventsource=False to run the stock "
                "httpd (its eventSourceUrl answers 204)"
            ) from None
    return sha, _patched[sha]


def missing_binaries() -> list[str]:
    return [str(p) for p in REQUIRED_BINARIES if not os.access(p, os.X_OK)]


def require_cyrus() -> None:
    """Raise `CyrusNotInstalled` (with the install hint) unless every binary is present."""
    missing = missing_binaries()
    if missing:
        raise CyrusNotInstalled(
            "Cyrus IMAP/JMAP is not installed (missing: "
            + ", ".join(missing)
            + "); "
            + INSTALL_HINT
        )


def free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class CyrusPorts:
    https: int
    http: int
    imap: int
    lmtp: int

    @classmethod
    def pick(cls) -> CyrusPorts:
        ports: set[int] = set()
        while len(ports) < 4:
            ports.add(free_port())
        https, http, imap, lmtp = sorted(ports)
        return cls(https=https, http=http, imap=imap, lmtp=lmtp)


@dataclass(frozen=True)
class Appended:
    """A message put in place over IMAP: where it is and what it is called."""

    user: str
    mailbox: str
    uid: int
    message_id: str  # with angle brackets
    email_id: str  # the JMAP Email id (IMAP OBJECTID EMAILID, RFC 8474)


def make_message(
    subject: str = "Hello",
    body: str = "Hello there.",
    *,
    sender: str = "Bob Example <bob@example.org>",
    to: str = "alice@localhost",
    date: dt.datetime | None = None,
    message_id: str | None = None,
    html: str | None = None,
) -> bytes:
    """An RFC 5322 message (CRLF line ends). With `html`, a multipart/alternative."""
    msg = EmailMessage(policy=SMTP)
    msg["From"] = sender
    msg["To"] = to
    msg["Subject"] = subject
    msg["Date"] = email.utils.format_datetime(date or dt.datetime.now(dt.UTC))
    msg["Message-ID"] = message_id or email.utils.make_msgid(domain="example.org")
    msg.set_content(body)
    if html is not None:
        msg.add_alternative(html, subtype="html")
    return msg.as_bytes()


@dataclass
class CyrusServer:
    """One private Cyrus instance. Use `start()` / `stop()` or `with CyrusServer(...) as srv:`.

    `eventsource`: run the patched httpd copy so `eventSourceUrl` works (see the module
    docstring); `push_poll`: `jmap_pushpoll` in whole seconds, how often Cyrus looks for changes
    to push; `stock_httpd`: the binary that is copied and patched; `smtp_host`
    (`host:port/noauth`, e.g. `tests.peers.smtp.SmtpSink.smtp_host`): the SMTP server JMAP
    `EmailSubmission/set` relays to (`smtp_backend: host`), by default none (sendmail)."""

    base_dir: Path
    users: dict[str, str] = field(default_factory=lambda: {"alice": "secret"})
    ports: CyrusPorts = field(default_factory=CyrusPorts.pick)
    admin_password: str = "admin-secret"
    startup_timeout: float = 30.0
    eventsource: bool = True
    push_poll: int = 1
    stock_httpd: Path = STOCK_HTTPD
    smtp_host: str | None = None  # `host:port/noauth`: where EmailSubmission relays to
    startup_seconds: float = field(default=0.0, init=False)  # how long the last start() took
    _httpd: Path | None = field(default=None, init=False, repr=False)
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _watchdog: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    # ------------------------------------------------------------------ paths and URLs
    @property
    def conf(self) -> Path:
        return self.base_dir / "imapd.conf"

    @property
    def master_conf(self) -> Path:
        return self.base_dir / "cyrus.conf"

    @property
    def ca_file(self) -> Path:
        """PEM of the CA that signed the HTTPS certificate (pass as verify / SSL_CERT_FILE)."""
        return self.base_dir / "tls" / "ca.pem"

    @property
    def server_cert(self) -> Path:
        """The HTTPS server certificate (for 127.0.0.1 and localhost) and its key: tests may
        reuse them for small fake servers that clients must trust like the Cyrus one."""
        return self.base_dir / "tls" / "server.pem"

    @property
    def server_key(self) -> Path:
        return self.base_dir / "tls" / "server.key"

    @property
    def origin(self) -> str:
        return f"https://{HOST}:{self.ports.https}"

    @property
    def session_url(self) -> str:
        """HTTPS session resource; Cyrus answers 301 to /jmap/, whose URLs are relative."""
        return f"{self.origin}/.well-known/jmap"

    @property
    def http_origin(self) -> str:
        return f"http://{HOST}:{self.ports.http}"

    @property
    def http_session_url(self) -> str:
        return f"{self.http_origin}/.well-known/jmap"

    @property
    def httpd_binary(self) -> Path:
        """The httpd the JMAP listeners run: the patched copy, or the stock one with
        `eventsource=False` (known once `start()` has run)."""
        if self._httpd is not None:
            return self._httpd
        return self.base_dir / "bin" / PATCHED_HTTPD_NAME if self.eventsource else self.stock_httpd

    @property
    def eventsource_url(self) -> str:
        """The HTTPS `eventSourceUrl` template of the first user's session, made absolute:
        `https://127.0.0.1:PORT/jmap/eventsource/?types={types}&closeafter={closeafter}&ping={ping}`
        (an RFC 6570 level-1 template; fetched from the running server on every access)."""
        return self.session_eventsource_url()

    @property
    def http_eventsource_url(self) -> str:
        """The same template over plain HTTP."""
        return self.session_eventsource_url(tls=False)

    def session(self, user: str | None = None, *, tls: bool = True) -> dict[str, Any]:
        """The JMAP session resource of `user` (default: the first one), redirects followed,
        with its URLs made absolute against the URL it was served from."""
        user = user or next(iter(self.users))
        url = self.session_url if tls else self.http_session_url
        req = urllib.request.Request(
            url, headers={"Authorization": _basic(user, self._password(user))}
        )
        with urllib.request.urlopen(
            req, timeout=10, context=self.ssl_context() if tls else None
        ) as r:
            session: dict[str, Any] = json.load(r)
            served_from = r.geturl()
        for key in ("apiUrl", "downloadUrl", "uploadUrl", "eventSourceUrl"):
            if isinstance(session.get(key), str):
                session[key] = urllib.parse.urljoin(served_from, session[key])
        return session

    def session_eventsource_url(self, user: str | None = None, *, tls: bool = True) -> str:
        url = self.session(user, tls=tls).get("eventSourceUrl")
        if not isinstance(url, str) or not url:
            raise CyrusError(f"session without eventSourceUrl: {url!r}")
        return url

    @property
    def master_log(self) -> Path:
        return self.base_dir / "master.log"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> CyrusServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start (or start again: same data, users and ports) and return once IMAP, LMTP and
        JMAP answer for every user, and EventSource does unless `eventsource=False`."""
        require_cyrus()
        if self.running:
            return
        started = time.monotonic()
        deadline = started + self.startup_timeout
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self._check_traversable()
        self._httpd = self._install_httpd()
        self._write_config()
        self._write_tls()
        self._write_users()
        self._chown()
        self.master_log.unlink(missing_ok=True)
        self._wait_ports_bindable(deadline)
        with open(self.base_dir / "master.out", "ab") as out:
            self._proc = subprocess.Popen(
                [
                    str(MASTER),
                    "-C", str(self.conf),
                    "-M", str(self.master_conf),
                    "-p", str(self.base_dir / "run" / "master.pid"),
                    "-L", str(self.master_log),
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        self._start_watchdog()
        try:
            for port in (self.ports.imap, self.ports.lmtp, self.ports.https, self.ports.http):
                self._wait_port(port, deadline)
            for user, password in self.users.items():
                self._first_login(user, password)
            session = self._wait_session(deadline)
            if self.eventsource:
                self._check_eventsource(session)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started

    def restart(self) -> None:
        """`stop()` then `start()`: the same data dir, users and ports. Clients connected to
        the old instance see their connections closed."""
        self.stop()
        self.start()

    @contextlib.contextmanager
    def stopped(self) -> Iterator[None]:
        """Cyrus is unreachable inside the block (its ports refuse connections) and is started
        again, with all its data, on the way out (also when the block raises)."""
        self.stop()
        try:
            yield
        finally:
            self.start()

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # master passes SIGTERM on to its children
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)  # our own session/process group
                proc.wait(timeout=5)
        for pid in self._leftover_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        # Service children hold the listening sockets too: gone only when they are.
        deadline = time.monotonic() + 10
        while any(True for _ in self._leftover_pids()) and time.monotonic() < deadline:
            time.sleep(0.02)
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None and watchdog.stdin is not None:
            watchdog.stdin.close()  # EOF: it finds nothing left to stop and exits
            try:
                watchdog.wait(timeout=10)
            except subprocess.TimeoutExpired:
                watchdog.kill()

    def _start_watchdog(self) -> None:
        """A small process that stops this instance if the test process dies without calling
        `stop()` (SIGKILL, a CI timeout): it waits for EOF on a pipe only we hold open."""
        self._watchdog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(self.conf)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def _leftover_pids(self) -> Iterator[int]:
        """Processes of this instance only: their command line names our imapd.conf."""
        marker = str(self.conf).encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if marker in cmdline.split(b"\0") and state != "Z":
                yield int(entry.name)

    def _fail(self, what: str) -> CyrusError:
        tail = ""
        for log in (self.master_log, self.base_dir / "master.out"):
            if log.exists():
                tail += f"\n--- {log.name} ---\n" + "\n".join(
                    log.read_text(errors="replace").splitlines()[-30:]
                )
        return CyrusError(f"test Cyrus in {self.base_dir}: {what}{tail}")

    def _wait_ports_bindable(self, deadline: float) -> None:
        """Wait until cyrmaster can bind every port: with SO_REUSEADDR (as cyrmaster binds),
        sockets in TIME_WAIT from an earlier run do not count; a listener still open does."""
        for port in (self.ports.https, self.ports.http, self.ports.imap, self.ports.lmtp):
            while True:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    try:
                        s.bind((HOST, port))
                        break
                    except OSError as exc:
                        if time.monotonic() > deadline:
                            raise CyrusError(
                                f"test Cyrus in {self.base_dir}: port {HOST}:{port} stays in "
                                f"use ({exc}); pids of this instance still alive: "
                                f"{list(self._leftover_pids())}"
                            ) from None
                time.sleep(0.02)

    def _wait_port(self, port: int, deadline: float) -> None:
        while True:
            if self._proc is not None and self._proc.poll() is not None:
                raise self._fail(f"cyrmaster exited with {self._proc.returncode}")
            try:
                socket.create_connection((HOST, port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise self._fail(f"port {port} not listening") from None
                time.sleep(0.05)

    def _wait_session(self, deadline: float) -> dict[str, Any]:
        user, password = next(iter(self.users.items()))
        req = urllib.request.Request(
            self.session_url, headers={"Authorization": _basic(user, password)}
        )
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(req, timeout=5, context=self.ssl_context()) as r:
                    session: dict[str, Any] = json.load(r)
                if "urn:ietf:params:jmap:mail" in session.get("capabilities", {}):
                    return session
                last = CyrusError(f"session without mail capability: {session}")
            except (OSError, ValueError) as exc:
                last = exc
            time.sleep(0.1)
        raise self._fail(f"JMAP session did not answer: {last!r}")

    def _check_eventsource(self, session: dict[str, Any]) -> None:
        """The patched httpd must answer the session's eventSourceUrl with 200 and an event
        stream (the stock one answers 204). Checked over plain HTTP: both listeners run the
        same binary with the same configuration, and each check costs an httpd fork."""
        template = session.get("eventSourceUrl")
        if not isinstance(template, str) or not template:
            raise self._fail(f"session without eventSourceUrl: {template!r}")
        url = urllib.parse.urlsplit(
            urllib.parse.urljoin(
                self.http_session_url,
                template.replace("{types}", "*")
                .replace("{closeafter}", "state")
                .replace("{ping}", "0"),
            )
        )
        user = next(iter(self.users))
        head = b""
        try:
            with socket.create_connection((HOST, self.ports.http), timeout=10) as conn:
                conn.sendall(
                    (
                        f"GET {url.path}?{url.query} HTTP/1.1\r\n"
                        f"Host: {HOST}:{self.ports.http}\r\n"
                        f"Authorization: {_basic(user, self._password(user))}\r\n"
                        "Accept: text/event-stream\r\n\r\n"
                    ).encode()
                )
                while b"\r\n\r\n" not in head and len(head) < 8192:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    head += chunk
        except OSError as exc:
            raise self._fail(f"EventSource check failed: {exc!r} after {head!r}") from None
        status = head.split(b"\r\n", 1)[0].decode(errors="replace")
        if " 200 " not in f"{status} " or b"text/event-stream" not in head.lower():
            raise self._fail(
                f"EventSource answers {status!r}, not 200 with an event stream, although "
                f"{self.httpd_binary} runs with jmap_pushpoll {self.push_poll}s"
            )

    # ------------------------------------------------------------------ setup files
    def _install_httpd(self) -> Path:
        """The httpd for the JMAP listeners; with `eventsource`, the patched copy in bin/
        (rewritten only when missing or made from another stock binary)."""
        if not self.eventsource:
            return self.stock_httpd
        sha, patched = _patched_httpd(self.stock_httpd)
        target = self.base_dir / "bin" / PATCHED_HTTPD_NAME
        stamp = target.with_name(PATCHED_HTTPD_NAME + ".sha256")
        if target.exists() and stamp.exists() and stamp.read_text().strip() == sha:
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(PATCHED_HTTPD_NAME + ".tmp")
        tmp.write_bytes(patched)
        tmp.chmod(0o755)
        tmp.replace(target)
        stamp.write_text(sha + "\n")
        return target

    def _check_traversable(self) -> None:
        if os.geteuid() != 0:
            return
        for parent in [self.base_dir, *self.base_dir.parents]:
            if not os.stat(parent).st_mode & 0o001:
                raise CyrusError(
                    f"{parent} is not world-traversable; the `cyrus` user cannot reach "
                    f"{self.base_dir}. Put the instance under /tmp (see the jmap conftest)."
                )

    def _write_config(self) -> None:
        d = self.base_dir
        for sub in (
            "conf/db", "conf/log", "conf/msg", "conf/user", "conf/quota", "conf/lock",
            "conf/ptclient", "conf/socket", "conf/proc", "conf/sieve", "spool", "search",
            "sieve", "tls", "run/socket", "run/proc", "run/lock",
        ):  # fmt: skip
            (d / sub).mkdir(parents=True, exist_ok=True)
        lines = {
            "configdirectory": d / "conf",
            "partition-default": d / "spool",
            "defaultpartition": "default",
            "sievedir": d / "sieve",
            "proc_path": d / "run/proc",
            "mboxname_lockpath": d / "run/lock",
            "lmtpsocket": d / "run/socket/lmtp",
            "idlesocket": d / "run/socket/idle",
            "notifysocket": d / "run/socket/notify",
            "servername": REALM,
            "syslog_prefix": f"cyrus-test-{self.ports.https}",
            "admins": "admin",
            "allowplaintext": "yes",
            "sasl_pwcheck_method": "auxprop",
            "sasl_auxprop_plugin": "sasldb",
            "sasl_sasldb_path": d / "sasldb2",
            "sasl_mech_list": "PLAIN LOGIN",
            "unixhierarchysep": "yes",
            "altnamespace": "yes",
            "virtdomains": "off",
            "autocreate_quota": "0",
            "autocreate_post": "yes",
            "autocreate_inbox_folders": " | ".join(SPECIAL_FOLDERS),
            "autocreate_subscribe_folders": " | ".join(SPECIAL_FOLDERS),
            **{f"xlist-{f.lower()}": f for f in SPECIAL_FOLDERS},
            "conversations": "yes",  # mandatory for JMAP
            "conversations_db": "twoskip",
            "httpmodules": "jmap",
            "httpallowcompress": "no",
            "jmap_preview_length": "256",
            **({"jmap_pushpoll": f"{self.push_poll}s"} if self.eventsource else {}),
            "search_engine": "xapian",
            "search_index_headers": "yes",
            "defaultsearchtier": "t1",
            "t1searchpartition-default": d / "search",
            "sync_log": "yes",
            "sync_log_channels": "squatter",
            "tls_server_cert": d / "tls/server.pem",
            "tls_server_key": d / "tls/server.key",
        }
        if self.smtp_host:  # imapd.conf(5): else Cyrus forks sendmail for a submission
            lines |= {"smtp_backend": "host", "smtp_host": self.smtp_host}
        if os.geteuid() != 0:
            # Not root: Cyrus must not try to switch to the `cyrus` user.
            lines["cyrus_user"] = pwd.getpwuid(os.geteuid()).pw_name
        self.conf.write_text(
            "# generated by tests/peers/cyrus.py: test instance, loopback only\n"
            + "".join(f"{k}: {v}\n" for k, v in lines.items())
        )
        c = f"-C {self.conf}"
        p = self.ports
        httpd = self.httpd_binary
        self.master_conf.write_text(
            "# generated by tests/peers/cyrus.py; every cmd gets -C (master does not pass it on)\n"
            f'START {{\n  recover cmd="ctl_cyrusdb {c} -r"\n}}\n'
            "SERVICES {\n"
            f'  imap cmd="imapd {c}" listen="{HOST}:{p.imap}" prefork=0\n'
            f'  http cmd="{httpd} {c}" listen="{HOST}:{p.http}" prefork=0\n'
            f'  https cmd="{httpd} -s {c}" listen="{HOST}:{p.https}" prefork=0\n'
            f'  lmtp cmd="lmtpd -a {c}" listen="{HOST}:{p.lmtp}" prefork=0\n'
            "}\n"
            f'EVENTS {{\n  checkpoint cmd="ctl_cyrusdb {c} -c" period=30\n}}\n'
            "DAEMON {\n"
            f'  idled cmd="idled {c}"\n'
            f'  squatter cmd="squatter {c} -R -d"\n'
            "}\n"
        )

    def _write_tls(self) -> None:
        tls = self.base_dir / "tls"
        if (tls / "server.pem").exists() and self.ca_file.exists():
            return
        ca_pem, cert_pem, key_pem = _make_test_pki()
        self.ca_file.write_bytes(ca_pem)
        (tls / "server.pem").write_bytes(cert_pem)
        key = tls / "server.key"
        key.write_bytes(key_pem)
        key.chmod(0o600)

    def _write_users(self) -> None:
        self._saslpasswd("admin", self.admin_password)
        for user, password in self.users.items():
            self._saslpasswd(user, password)

    def _saslpasswd(self, user: str, password: str) -> None:
        db = self.base_dir / "sasldb2"
        res = subprocess.run(
            [str(SASLPASSWD2), "-p", "-c", "-f", str(db), "-u", REALM, user],
            input=password.encode(),
            capture_output=True,
            timeout=10,
            check=False,
        )
        if res.returncode != 0:
            raise CyrusError(
                f"saslpasswd2 for {user} failed: {res.stderr.decode(errors='replace')}"
            )
        if os.geteuid() == 0:
            os.chown(db, _cyrus_uid(), _mail_gid())
        db.chmod(0o640)

    def _chown(self) -> None:
        if os.geteuid() != 0:
            return
        uid, gid = _cyrus_uid(), _mail_gid()
        os.chown(self.base_dir, uid, gid)
        self.base_dir.chmod(0o755)
        for root, dirs, files in os.walk(self.base_dir):
            for name in dirs + files:
                os.chown(os.path.join(root, name), uid, gid)

    def _first_login(self, user: str, password: str) -> None:
        """The first IMAP login autocreates INBOX and the special-use folders."""
        with self.imap(user, password) as m:
            typ, _ = m.select("INBOX")
            if typ != "OK":
                raise self._fail(f"INBOX of {user} missing after first login")

    # ------------------------------------------------------------------ users and mail
    def add_user(self, user: str, password: str) -> None:
        """Create (or re-password) a user while the server runs, and autocreate its folders."""
        self._saslpasswd(user, password)
        self.users[user] = password
        if self.running:
            self._first_login(user, password)

    def _password(self, user: str) -> str:
        try:
            return self.users[user]
        except KeyError:
            raise CyrusError(f"unknown test user {user!r}") from None

    @contextlib.contextmanager
    def imap(self, user: str = "alice", password: str | None = None) -> Iterator[imaplib.IMAP4]:
        m = imaplib.IMAP4(HOST, self.ports.imap, timeout=10)
        # imaplib writes an APPEND's literal and the CRLF that ends the command separately;
        # with Nagle's algorithm the CRLF waits for the ACK of the literal, which the server
        # delays (~40 ms) since it has nothing to answer yet: 50-70 ms an APPEND against 4-8 ms
        # with TCP_NODELAY, measured here (the suite appends hundreds of mails).
        m.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            m.login(user, password if password is not None else self._password(user))
            yield m
        finally:
            with contextlib.suppress(Exception):
                m.logout()

    def append(
        self,
        raw: bytes | None = None,
        *,
        mailbox: str = "INBOX",
        user: str = "alice",
        flags: Sequence[str] = (),
        received_at: dt.datetime | float | None = None,
        **message: object,
    ) -> Appended:
        """IMAP APPEND `raw` (or `make_message(**message)`) to `mailbox` of `user`.

        `received_at` becomes the INTERNALDATE, which JMAP reports as `receivedAt`.
        """
        if raw is None:
            raw = make_message(**message)  # type: ignore[arg-type]
        mid = _message_id(raw)
        date = imaplib.Time2Internaldate(received_at if received_at is not None else time.time())
        flag_list = "(" + " ".join(flags) + ")" if flags else None
        with self.imap(user) as m:
            uid = _appended_uid(m.append(_quote(mailbox), flag_list, date, raw), mailbox)
            m.select(_quote(mailbox), readonly=True)
            [email_id] = self._emailids(m, [uid])
        return Appended(user=user, mailbox=mailbox, uid=uid, message_id=mid, email_id=email_id)

    def append_many(self, subjects: Sequence[str], *, user: str = "alice") -> list[Appended]:
        """`append(subject=…)` of each subject to `user`'s INBOX, in this order, over one IMAP
        connection, their EMAILIDs read in one FETCH (a connection of its own per mail took
        most of a 200-mail test's set-up)."""
        now = imaplib.Time2Internaldate(time.time())
        sent: list[tuple[int, str]] = []
        with self.imap(user) as m:
            for subject in subjects:
                raw = make_message(subject=subject)
                sent.append((_appended_uid(m.append("INBOX", None, now, raw), "INBOX"),
                             _message_id(raw)))
            if not sent:
                return []
            m.select("INBOX", readonly=True)
            email_ids = self._emailids(m, [uid for uid, _ in sent])
        return [Appended(user=user, mailbox="INBOX", uid=uid, message_id=mid, email_id=email_id)
                for (uid, mid), email_id in zip(sent, email_ids, strict=True)]

    @staticmethod
    def _emailids(m: imaplib.IMAP4, uids: Sequence[int]) -> list[str]:
        """The EMAILIDs of `uids` (ascending, of the selected mailbox), in one FETCH."""
        typ, data = m.uid("FETCH", f"{uids[0]}:{uids[-1]}", "(EMAILID)")
        ids: dict[int, str] = {}
        for item in data:
            line = item if isinstance(item, bytes) else b" ".join(item or ())
            uid, eid = re.search(rb"UID (\d+)", line), re.search(rb"EMAILID \(([^)\s]+)\)", line)
            if uid and eid:
                ids[int(uid.group(1))] = eid.group(1).decode()
        missing = [uid for uid in uids if uid not in ids]
        if typ != "OK" or missing:
            raise CyrusError(f"FETCH EMAILID failed for {missing!r}: {data[:3]!r}")
        return [ids[uid] for uid in uids]

    def deliver(self, raw: bytes, user: str = "alice", sender: str = "bob@example.org") -> None:
        """Deliver over LMTP (like an MTA would), to `user`'s INBOX."""
        with smtplib.LMTP(HOST, self.ports.lmtp, timeout=10) as lmtp:
            refused = lmtp.sendmail(sender, [user], raw)
        if refused:
            raise CyrusError(f"LMTP refused: {refused!r}")

    def set_flags(
        self,
        msg: Appended,
        flags: Iterable[str],
        *,
        mode: str = "+",
    ) -> None:
        """UID STORE: mode "+" adds, "-" removes, "" replaces. Flags like `\\Seen`, `$Label`."""
        if mode not in ("+", "-", ""):
            raise ValueError("mode must be '+', '-' or ''")
        with self.imap(msg.user) as m:
            m.select(_quote(msg.mailbox))
            typ, data = m.uid("STORE", str(msg.uid), f"{mode}FLAGS", "(" + " ".join(flags) + ")")
            if typ != "OK":
                raise CyrusError(f"STORE failed: {data!r}")

    def move(self, msg: Appended, to_mailbox: str) -> Appended:
        """UID MOVE (RFC 6851) to another mailbox; the JMAP Email id stays the same."""
        with self.imap(msg.user) as m:
            m.select(_quote(msg.mailbox))
            typ, data = m.uid("MOVE", str(msg.uid), _quote(to_mailbox))
            if typ != "OK":
                raise CyrusError(f"MOVE failed: {data!r}")
            m.select(_quote(to_mailbox), readonly=True)
            typ, data = m.uid("SEARCH", "HEADER", "Message-ID", _quote(msg.message_id))
            uids = (data[0] or b"").split() if typ == "OK" else []
            if not uids:
                raise CyrusError(f"moved message not found in {to_mailbox}")
        return Appended(msg.user, to_mailbox, int(uids[-1]), msg.message_id, msg.email_id)

    def move_to_trash(self, msg: Appended) -> Appended:
        return self.move(msg, "Trash")

    def expunge(self, msg: Appended) -> None:
        """Mark \\Deleted and UID EXPUNGE: JMAP reports the email as destroyed."""
        with self.imap(msg.user) as m:
            m.select(_quote(msg.mailbox))
            m.uid("STORE", str(msg.uid), "+FLAGS", "(\\Deleted)")
            typ, data = m.uid("EXPUNGE", str(msg.uid))
            if typ != "OK":
                raise CyrusError(f"UID EXPUNGE failed: {data!r}")

    def purge_expunged(self, user: str) -> None:
        """cyr_expire -X 0: forget expunged messages now. Afterwards Email/changes from any
        state older than the purge answers `cannotCalculateChanges` ("outdated sinceModseq")."""
        self._tool("cyr_expire", "-X", "0", "-D", "0", "-u", user)

    def index(self, user: str | None = None) -> None:
        """Run squatter synchronously, so text queries and SearchSnippet/get see all mail."""
        for u in [user] if user else list(self.users):
            self._tool("squatter", "-i", "-u", u)

    def _tool(self, name: str, *args: str) -> None:
        cmd = [str(CYRUS_LIBEXEC / name), "-C", str(self.conf), *args]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "cyrus", "--", *cmd]
        res = subprocess.run(cmd, capture_output=True, timeout=60, check=False)
        if res.returncode != 0:
            raise CyrusError(
                f"{name} {' '.join(args)} failed ({res.returncode}): "
                + (res.stdout + res.stderr).decode(errors="replace")[-2000:]
            )


# ---------------------------------------------------------------------- helpers

_WATCHDOG = r"""
import os, signal, sys, time
marker = sys.argv[1].encode()
sys.stdin.buffer.read()  # EOF when the test process closes the pipe or dies

def ours():
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{name}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in argv and state != "Z":
            found.append((int(name), argv[0]))
    return found

for pid, exe in ours():
    if exe.endswith(b"cyrmaster") or exe.endswith(b"/master"):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
end = time.monotonic() + 5
while ours() and time.monotonic() < end:
    time.sleep(0.1)
for pid, _exe in ours():
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
"""


def _basic(user: str, password: str) -> str:
    return "Basic " + b64encode(f"{user}:{password}".encode()).decode()


def _appended_uid(answer: tuple[str, list[Any]], mailbox: str) -> int:
    """The UID of an APPEND's `APPENDUID` answer (RFC 4315)."""
    typ, data = answer
    if typ != "OK":
        raise CyrusError(f"APPEND to {mailbox} failed: {data!r}")
    found = re.search(rb"APPENDUID \d+ (\d+)", data[0] or b"")
    if not found:
        raise CyrusError(f"no APPENDUID in {data!r}")
    return int(found.group(1))


def _quote(mailbox: str) -> str:
    return '"' + mailbox.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _message_id(raw: bytes) -> str:
    found = re.search(rb"(?im)^message-id:\s*(<[^>\r\n]+>)", raw)
    return found.group(1).decode() if found else ""


def _cyrus_uid() -> int:
    try:
        return pwd.getpwnam("cyrus").pw_uid
    except KeyError:
        raise CyrusNotInstalled(f"no `cyrus` system user; {INSTALL_HINT}") from None


def _mail_gid() -> int:
    return grp.getgrnam("mail").gr_gid


def _make_test_pki() -> tuple[bytes, bytes, bytes]:
    """A CA and a server certificate for 127.0.0.1 / localhost. Returns (ca, cert, key) PEM."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    later = now + dt.timedelta(days=30)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "MessageWeave test CA")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    import ipaddress

    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOST)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(HOST)), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return ca.public_bytes(pem), cert.public_bytes(pem), key_pem


@contextlib.contextmanager
def running(prefix: str = "mw-cyrus-", **options: Any) -> Iterator[CyrusServer]:
    """A `CyrusServer(**options)` in a fresh base dir, started; stopped and its dir removed
    afterwards. Raises `CyrusNotInstalled` when the packages are missing."""
    require_cyrus()
    base = new_base_dir(prefix)
    server = CyrusServer(base, **options)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        remove_base_dir(base)


def new_base_dir(prefix: str = "mw-cyrus-") -> Path:
    """A fresh directory under the system temp dir that the `cyrus` user can reach."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


def remove_base_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
