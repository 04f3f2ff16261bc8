"""A real IMAP server for tests: Debian 12's Dovecot 2.3 on 127.0.0.1, in a private directory.

`DovecotServer(base_dir)` writes its own `dovecot.conf` (the system's /etc/dovecot is never
read), a throw-away CA plus a server certificate, a passwd-file with the test users, then runs
`dovecot -F` in the foreground (our child process) with these listeners, all bound to 127.0.0.1
on free ports:

- IMAPS, implicit TLS (`ports.imaps`), verified with `ca_file`
- IMAP with STARTTLS (`ports.imap`; Dovecot counts loopback as secure, so LOGIN works without it)
- LMTP without authentication (`ports.lmtp`), used by `deliver`

Each user has a maildir with INBOX and the special-use mailboxes Drafts, Sent, Archive, Junk and
Trash (RFC 6154), created and subscribed at the first login. The server offers AUTH PLAIN and
LOGIN, IDLE (with a 1 s mailbox check), CONDSTORE, QRESYNC, MOVE, UIDPLUS and SPECIAL-USE.
`capability` replaces what IMAP advertises after login (Dovecot's `imap_capability`), so a test
can meet a real server without MOVE, say.

Why dovecot-imapd is not installed: Debian's cyrus-imapd `Conflicts: imap-server`, which
dovecot-imapd provides, so installing one removes the other, and the suite needs both.
`scripts/install-test-packages.sh` installs dovecot-core and dovecot-lmtpd (they sit beside Cyrus)
and unpacks the dovecot-imapd .deb of dovecot-core's exact version into
`/var/cache/messageweave-test/dovecot-imapd/<version>` (`DOVECOT_IMAPD_CACHE` overrides it); the
`imap` and `imap-login` services run the binaries from there. When something is missing,
`start()` raises `DovecotNotInstalled`, whose message says to run that script; the pytest fixture
turns this into a failure, never a skip.

Runs as root only (Dovecot's master binds, then drops to `dovenull` for logins and to `mail` for
the maildirs); otherwise `start()` raises `DovecotError`.

A watchdog process stops the instance if the test process dies without `stop()`, so no Dovecot
outlives its test run. The data stays in `base_dir` across `stop()` / `start()` (users, mail,
TLS files, ports): `restart()` and `with srv.stopped(): ...` bounce the server while clients
are connected (`shutdown_clients = yes`: their connections are closed). When start-up fails,
the error carries the tail of `dovecot.log`.
"""

from __future__ import annotations

import contextlib
import imaplib
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
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.peers.cyrus import _make_test_pki, free_port, make_message

HOST = "127.0.0.1"
DOVECOT = Path("/usr/sbin/dovecot")
LMTP = Path("/usr/lib/dovecot/lmtp")
IMAPD_CACHE = Path(
    os.environ.get("DOVECOT_IMAPD_CACHE", "/var/cache/messageweave-test/dovecot-imapd")
)
MAIL_USER = "mail"  # owns the maildirs (Debian's uid 8)
INSTALL_HINT = (
    "run `sudo scripts/install-test-packages.sh` (installs dovecot-core and dovecot-lmtpd, "
    "unpacks dovecot-imapd beside Cyrus)"
)
SPECIAL_USE = {
    "Drafts": "\\Drafts",
    "Sent": "\\Sent",
    "Archive": "\\Archive",
    "Junk": "\\Junk",
    "Trash": "\\Trash",
}


class DovecotError(RuntimeError):
    """The test Dovecot could not be started or driven."""


class DovecotNotInstalled(DovecotError):
    """Dovecot's binaries (or the unpacked dovecot-imapd) are missing on this machine."""


def imapd_dir() -> Path:
    """Where the unpacked dovecot-imapd of the installed dovecot-core's version keeps `imap`."""
    try:
        version = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", "dovecot-core"],
            capture_output=True, text=True, check=True, timeout=10,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        raise DovecotNotInstalled(f"dovecot-core is not installed; {INSTALL_HINT}") from None
    safe = re.sub(r"[^A-Za-z0-9.+~-]", "_", version)
    return IMAPD_CACHE / safe / "usr/lib/dovecot"


def require_dovecot() -> Path:
    """The directory of the `imap` binaries; raises `DovecotNotInstalled` with the hint."""
    missing = [str(p) for p in (DOVECOT, LMTP) if not os.access(p, os.X_OK)]
    if missing:
        raise DovecotNotInstalled(f"Dovecot is not installed (missing: {missing}); {INSTALL_HINT}")
    libexec = imapd_dir()
    missing = [
        str(libexec / b) for b in ("imap", "imap-login") if not os.access(libexec / b, os.X_OK)
    ]
    if missing:
        raise DovecotNotInstalled(
            f"dovecot-imapd is not unpacked (missing: {missing}); {INSTALL_HINT}"
        )
    return libexec


@dataclass(frozen=True)
class DovecotPorts:
    imaps: int
    imap: int
    lmtp: int

    @classmethod
    def pick(cls) -> DovecotPorts:
        ports: set[int] = set()
        while len(ports) < 3:
            ports.add(free_port())
        imaps, imap, lmtp = sorted(ports)
        return cls(imaps=imaps, imap=imap, lmtp=lmtp)


@dataclass
class DovecotServer:
    """One private Dovecot instance. Use `start()` / `stop()` or `with DovecotServer(...)`.

    `users`: name -> password; `capability`: the post-login CAPABILITY list to advertise instead
    of Dovecot's own (None: Dovecot's)."""

    base_dir: Path
    users: dict[str, str] = field(default_factory=lambda: {"alice": "secret"})
    ports: DovecotPorts = field(default_factory=DovecotPorts.pick)
    capability: str | None = None
    startup_timeout: float = 30.0
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _watchdog: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    # ------------------------------------------------------------------ paths
    @property
    def conf(self) -> Path:
        return self.base_dir / "dovecot.conf"

    @property
    def log(self) -> Path:
        return self.base_dir / "dovecot.log"

    @property
    def ca_file(self) -> Path:
        """PEM of the CA that signed the server certificate (for 127.0.0.1 and localhost)."""
        return self.base_dir / "tls" / "ca.pem"

    @property
    def instance_name(self) -> str:
        """Dovecot's process titles hold it (`dovecot-<name>/imap`): how this instance's
        processes are found."""
        return f"mw-dovecot-{self.ports.imaps}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def maildir(self, user: str) -> Path:
        return self.base_dir / "home" / user / "Maildir"

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> DovecotServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start (or start again: same data, users and ports) and return once IMAPS, IMAP and
        LMTP answer and every user has logged in once (which creates the mailboxes)."""
        libexec = require_dovecot()
        if os.geteuid() != 0:
            raise DovecotError("the test Dovecot runs as root only (its master binds and drops)")
        if self.running:
            return
        deadline = time.monotonic() + self.startup_timeout
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.base_dir.chmod(0o755)
        self._write_tls()
        self._write_config(libexec)
        self._write_users()
        self._wait_ports_bindable(deadline)
        with open(self.base_dir / "master.out", "ab") as out:
            self._proc = subprocess.Popen(
                [str(DOVECOT), "-F", "-c", str(self.conf)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        self._start_watchdog()
        try:
            for port in (self.ports.imaps, self.ports.imap, self.ports.lmtp):
                self._wait_port(port, deadline)
            for user in self.users:
                self._first_login(user, deadline)
        except BaseException:
            self.stop()
            raise

    def restart(self) -> None:
        """`stop()` then `start()`; connected clients see their connections closed."""
        self.stop()
        self.start()

    @contextlib.contextmanager
    def stopped(self) -> Iterator[None]:
        """Dovecot is unreachable inside the block, started again (same data) on the way out."""
        self.stop()
        try:
            yield
        finally:
            self.start()

    def stop(self) -> None:
        """Stop the master and every process of this instance; returns once all are gone."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # the master ends its children (shutdown_clients)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        deadline = time.monotonic() + 10
        while (left := list(self._leftover_pids())) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None and watchdog.stdin is not None:
            watchdog.stdin.close()  # EOF: it finds nothing left to stop and exits
            try:
                watchdog.wait(timeout=10)
            except subprocess.TimeoutExpired:
                watchdog.kill()

    def _start_watchdog(self) -> None:
        """Stops this instance if the test process dies without `stop()`: it waits for EOF on a
        pipe only we hold open."""
        self._watchdog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(self.conf), self.instance_name + "/"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip

    def _leftover_pids(self) -> Iterator[int]:
        """Processes of this instance only: the master names our conf, its children's titles
        hold the instance name."""
        for pid, cmdline in _processes():
            if _is_ours(cmdline, str(self.conf), self.instance_name + "/"):
                yield pid

    def _fail(self, what: str) -> DovecotError:
        tail = ""
        for log in (self.log, self.base_dir / "master.out"):
            if log.exists():
                lines = log.read_text(errors="replace").splitlines()[-30:]
                tail += f"\n--- {log.name} ---\n" + "\n".join(lines)
        return DovecotError(f"test Dovecot in {self.base_dir}: {what}{tail}")

    def _wait_ports_bindable(self, deadline: float) -> None:
        for port in (self.ports.imaps, self.ports.imap, self.ports.lmtp):
            while True:
                with socket.socket() as s:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    try:
                        s.bind((HOST, port))
                        break
                    except OSError as exc:
                        if time.monotonic() > deadline:
                            raise self._fail(f"port {port} stays in use ({exc})") from None
                time.sleep(0.02)

    def _wait_port(self, port: int, deadline: float) -> None:
        while True:
            if self._proc is not None and self._proc.poll() is not None:
                raise self._fail(f"dovecot exited with {self._proc.returncode}")
            try:
                socket.create_connection((HOST, port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise self._fail(f"port {port} not listening") from None
                time.sleep(0.05)

    def _first_login(self, user: str, deadline: float) -> None:
        """Log in until it works (Dovecot re-reads the passwd-file at most once a second) and
        select INBOX: the first login creates and subscribes the special-use mailboxes."""
        while True:
            try:
                with self.imap(user) as m:
                    if m.select("INBOX")[0] == "OK":
                        return
            except (imaplib.IMAP4.error, OSError) as exc:
                if time.monotonic() > deadline:
                    raise self._fail(f"first login of {user} failed: {exc}") from None
            time.sleep(0.1)

    # ------------------------------------------------------------------ setup files
    def _write_tls(self) -> None:
        tls = self.base_dir / "tls"
        if (tls / "server.pem").exists() and self.ca_file.exists():
            return
        tls.mkdir(parents=True, exist_ok=True)
        ca_pem, cert_pem, key_pem = _make_test_pki()
        self.ca_file.write_bytes(ca_pem)
        (tls / "server.pem").write_bytes(cert_pem)
        key = tls / "server.key"
        key.write_bytes(key_pem)
        key.chmod(0o600)

    def _write_config(self, libexec: Path) -> None:
        d = self.base_dir
        for sub in ("run", "state", "home"):
            (d / sub).mkdir(exist_ok=True)
        uid, gid = _mail_ids()
        os.chown(d / "home", uid, gid)
        mailboxes = "".join(
            f"  mailbox {name} {{\n    special_use = {flag}\n    auto = subscribe\n  }}\n"
            for name, flag in SPECIAL_USE.items()
        )
        services = "".join(
            f"service {name} {{\n  executable = {libexec / name}\n}}\n"
            for name in ("imap", "imap-hibernate", "imap-urlauth", "imap-urlauth-login",
                         "imap-urlauth-worker")
        )  # fmt: skip
        capability = f"  imap_capability = {self.capability}\n" if self.capability else ""
        p = self.ports
        self.conf.write_text(f"""\
# generated by tests/peers/dovecot.py: test instance, loopback only; /etc/dovecot is not read
instance_name = {self.instance_name}
base_dir = {d / "run"}
state_dir = {d / "state"}
protocols = imap lmtp
listen = {HOST}
log_path = {self.log}
info_log_path = {self.log}
auth_verbose = yes
shutdown_clients = yes
ssl = yes
ssl_cert = <{d / "tls/server.pem"}
ssl_key = <{d / "tls/server.key"}
ssl_min_protocol = TLSv1.2
auth_mechanisms = plain login
# A refused login answers at once (the default waits 2 s), and refused logins do not slow the
# next ones from 127.0.0.1 (the auth penalty is off: see `service anvil`): tests log in wrongly
# on purpose, and a user added while the server runs is refused until the passwd-file is re-read.
auth_failure_delay = 0 secs
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {d / "users"}
}}
userdb {{
  driver = passwd-file
  args = username_format=%u {d / "users"}
}}
first_valid_uid = {uid}
first_valid_gid = {gid}
mail_location = maildir:~/Maildir
mail_privileged_group =
mailbox_list_index = yes
mailbox_idle_check_interval = 1 secs
namespace inbox {{
  inbox = yes
  separator = /
  prefix =
{mailboxes}}}
protocol imap {{
  imap_idle_notify_interval = 2 secs
  mail_max_userip_connections = 200
{capability}}}
postmaster_address = postmaster@localhost
service imap-login {{
  executable = {libexec / "imap-login"}
  inet_listener imap {{
    address = {HOST}
    port = {p.imap}
  }}
  inet_listener imaps {{
    address = {HOST}
    port = {p.imaps}
    ssl = yes
  }}
}}
{services}service lmtp {{
  inet_listener lmtp {{
    address = {HOST}
    port = {p.lmtp}
  }}
  unix_listener lmtp {{
    mode = 0600
  }}
}}
service anvil {{
  unix_listener anvil-auth-penalty {{
    mode = 0
  }}
}}
service doveadm {{
  unix_listener doveadm-server {{
    mode = 0600
  }}
}}
""")

    def _write_users(self) -> None:
        """The passwd-file, written whole and renamed into place."""
        uid, gid = _mail_ids()
        lines = []
        for user, password in self.users.items():
            if re.search(r"[:\s]", user + password) or not user or not password:
                raise DovecotError(
                    f"user and password may not be empty or hold ':' or blanks: {user!r}"
                )
            home = self.base_dir / "home" / user
            home.mkdir(parents=True, exist_ok=True)
            os.chown(home, uid, gid)
            home.chmod(0o700)
            lines.append(f"{user}:{{PLAIN}}{password}:{uid}:{gid}::{home}::\n")
        tmp = self.base_dir / "users.tmp"
        tmp.write_text("".join(lines))
        tmp.chmod(0o640)
        with contextlib.suppress(KeyError):
            os.chown(tmp, 0, pwd.getpwnam("dovecot").pw_gid)
        tmp.replace(self.base_dir / "users")

    def log_mark(self) -> int:
        """Where `dovecot.log` ends now: `wait_for_log(after=...)` looks only past it."""
        return self.log.stat().st_size

    def wait_for_log(self, *words: str, after: int = 0, timeout: float = 10.0) -> str:
        """The first line of `dovecot.log` past byte `after` holding every one of `words`,
        once it is there (Dovecot's log process writes a little after the event)."""
        deadline = time.monotonic() + timeout
        while True:
            with open(self.log, "rb") as f:
                f.seek(after)
                lines = f.read().decode(errors="replace").splitlines()
            for line in lines:
                if all(w in line for w in words):
                    return line
            if time.monotonic() > deadline:
                raise self._fail(f"no log line with {words!r} within {timeout} s")
            time.sleep(0.05)

    # ------------------------------------------------------------------ users and mail
    def add_user(self, user: str, password: str) -> None:
        """Create (or re-password) a user while the server runs; returns once it can log in
        (its mailboxes then exist)."""
        self.users[user] = password
        self._write_users()
        if self.running:
            self._first_login(user, time.monotonic() + 10)

    @contextlib.contextmanager
    def imap(self, user: str = "alice", password: str | None = None) -> Iterator[imaplib.IMAP4]:
        """A logged-in `imaplib` client over IMAPS (for putting mail in place, not under test)."""
        m = imaplib.IMAP4_SSL(HOST, self.ports.imaps, ssl_context=self.ssl_context(), timeout=10)
        try:
            m.login(user, password if password is not None else self.users[user])
            yield m
        finally:
            with contextlib.suppress(Exception):
                m.logout()

    def deliver(self, raw: bytes, user: str = "alice", sender: str = "bob@example.org") -> None:
        """Deliver over LMTP (like an MTA would), to `user`'s INBOX."""
        with smtplib.LMTP(HOST, self.ports.lmtp, timeout=10) as lmtp:
            refused = lmtp.sendmail(sender, [user], raw)
        if refused:
            raise DovecotError(f"LMTP refused: {refused!r}")

    def append(
        self,
        user: str = "alice",
        mailbox: str = "INBOX",
        raw: bytes | None = None,
        flags: Sequence[str] = (),
        **message: object,
    ) -> int:
        """IMAP APPEND `raw` (or `make_message(**message)`) to `mailbox`; returns its UID."""
        if raw is None:
            raw = make_message(**message)  # type: ignore[arg-type]
        flag_list = "(" + " ".join(flags) + ")" if flags else None
        with self.imap(user) as m:
            typ, data = m.append(_quote(mailbox), flag_list, None, raw)
        found = re.search(rb"APPENDUID \d+ (\d+)", data[0] or b"") if typ == "OK" else None
        if not found:
            raise DovecotError(f"APPEND to {mailbox} failed: {typ} {data!r}")
        return int(found.group(1))

    def uids(self, user: str = "alice", mailbox: str = "INBOX", *criteria: str) -> list[int]:
        """UID SEARCH (default ALL) in `mailbox`, read-only."""
        with self.imap(user) as m:
            m.select(_quote(mailbox), readonly=True)
            typ, data = m.uid("SEARCH", *(criteria or ("ALL",)))
        if typ != "OK":
            raise DovecotError(f"UID SEARCH in {mailbox} failed: {data!r}")
        return [int(n) for n in (data[0] or b"").split()]

    def flags(self, uid: int, user: str = "alice", mailbox: str = "INBOX") -> set[str]:
        """The flags of one message, read-only."""
        with self.imap(user) as m:
            m.select(_quote(mailbox), readonly=True)
            typ, data = m.uid("FETCH", str(uid), "(FLAGS)")
        found = (
            re.search(rb"FLAGS \(([^)]*)\)", data[0] or b"") if typ == "OK" and data[0] else None
        )
        if not found:
            raise DovecotError(f"no message {uid} in {mailbox}: {data!r}")
        return set(found.group(1).decode().split())


# ---------------------------------------------------------------------- helpers

_WATCHDOG = r"""
import os, signal, sys, time
conf, title = sys.argv[1], sys.argv[2]
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
        if state != "Z" and (conf.encode() in argv or title.encode() in argv[0]):
            found.append((int(name), conf.encode() in argv))
    return found

for pid, master in ours():
    if master:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
end = time.monotonic() + 5
while ours() and time.monotonic() < end:
    time.sleep(0.1)
for pid, _master in ours():
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
"""


def _processes() -> Iterator[tuple[int, list[bytes]]]:
    """(pid, argv) of every live, non-zombie process but this one."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            yield int(entry.name), argv


def _is_ours(argv: list[bytes], conf: str, title: str) -> bool:
    return conf.encode() in argv or title.encode() in argv[0]


def _mail_ids() -> tuple[int, int]:
    try:
        entry = pwd.getpwnam(MAIL_USER)
    except KeyError:
        raise DovecotNotInstalled(f"no system user {MAIL_USER!r}") from None
    return entry.pw_uid, entry.pw_gid


def _quote(mailbox: str) -> str:
    return '"' + mailbox.replace("\\", "\\\\").replace('"', '\\"') + '"'


@contextlib.contextmanager
def running(prefix: str = "mw-dovecot-", **options: object) -> Iterator[DovecotServer]:
    """A `DovecotServer(**options)` in a fresh base dir, started; stopped and its dir removed
    afterwards. Raises `DovecotNotInstalled` when the packages are missing."""
    require_dovecot()
    base = Path(tempfile.mkdtemp(prefix=prefix))
    server = DovecotServer(base, **options)  # type: ignore[arg-type]
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
