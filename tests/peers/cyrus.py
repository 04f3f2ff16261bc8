"""A real JMAP server for tests: Debian's Cyrus IMAP 3.6 on 127.0.0.1, in a private directory.

`CyrusServer(base_dir)` writes its own `imapd.conf` / `cyrus.conf`, a throw-away CA plus a server
certificate, a private sasldb with the test users, then runs `cyrmaster` in the foreground (our
child process) with these listeners, all bound to 127.0.0.1 on free ports:

- HTTPS JMAP (`session_url`, verified with `ca_file`) and plain HTTP JMAP (`http_session_url`)
- IMAP (LOGIN without TLS), used to put mail in place (`append`, `set_flags`, `move`)
- LMTP without authentication (`lmtpd -a`), used by `deliver`

A rolling squatter keeps the Xapian index nearly current; `index()` runs it synchronously so
text queries and SearchSnippet/get see every message. Start-up takes about half a second.
Runs as root (Cyrus drops to the `cyrus` user) or as any other user (then `cyrus_user` is set
to that user).

The packages come from `scripts/install-test-packages.sh`. When they are missing, `start()` raises
`CyrusNotInstalled`, whose message says to run that script; the pytest fixtures turn this into a
failure, never a skip.

A watchdog process stops the instance if the test process dies without `stop()` (killed by a
CI timeout, say), so no Cyrus outlives its test run.

Cyrus logs to syslog only; this harness does not take over /dev/log. When start-up fails, the
error carries the tail of `master.log` (cyrmaster's own stdout/stderr).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import email.utils
import grp
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
import urllib.request
from base64 import b64encode
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.policy import SMTP
from pathlib import Path

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
    """One private Cyrus instance. Use `start()` / `stop()` or `with CyrusServer(...) as srv:`."""

    base_dir: Path
    users: dict[str, str] = field(default_factory=lambda: {"alice": "secret"})
    ports: CyrusPorts = field(default_factory=CyrusPorts.pick)
    admin_password: str = "admin-secret"
    startup_timeout: float = 30.0
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
    def http_session_url(self) -> str:
        return f"http://{HOST}:{self.ports.http}/.well-known/jmap"

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
        require_cyrus()
        if self.running:
            return
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self._check_traversable()
        self._write_config()
        self._write_tls()
        self._write_users()
        self._chown()
        self.master_log.unlink(missing_ok=True)
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
            deadline = time.monotonic() + self.startup_timeout
            for port in (self.ports.imap, self.ports.lmtp, self.ports.https, self.ports.http):
                self._wait_port(port, deadline)
            for user, password in self.users.items():
                self._first_login(user, password)
            self._wait_session(deadline)
        except BaseException:
            self.stop()
            raise

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

    def _wait_session(self, deadline: float) -> None:
        user, password = next(iter(self.users.items()))
        req = urllib.request.Request(
            self.session_url, headers={"Authorization": _basic(user, password)}
        )
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(req, timeout=5, context=self.ssl_context()) as r:
                    session = json.load(r)
                if "urn:ietf:params:jmap:mail" in session.get("capabilities", {}):
                    return
                last = CyrusError(f"session without mail capability: {session}")
            except (OSError, ValueError) as exc:
                last = exc
            time.sleep(0.1)
        raise self._fail(f"JMAP session did not answer: {last!r}")

    # ------------------------------------------------------------------ setup files
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
            "search_engine": "xapian",
            "search_index_headers": "yes",
            "defaultsearchtier": "t1",
            "t1searchpartition-default": d / "search",
            "sync_log": "yes",
            "sync_log_channels": "squatter",
            "tls_server_cert": d / "tls/server.pem",
            "tls_server_key": d / "tls/server.key",
        }
        if os.geteuid() != 0:
            # Not root: Cyrus must not try to switch to the `cyrus` user.
            lines["cyrus_user"] = pwd.getpwuid(os.geteuid()).pw_name
        self.conf.write_text(
            "# generated by tests/peers/cyrus.py: test instance, loopback only\n"
            + "".join(f"{k}: {v}\n" for k, v in lines.items())
        )
        c = f"-C {self.conf}"
        p = self.ports
        self.master_conf.write_text(
            "# generated by tests/peers/cyrus.py; every cmd gets -C (master does not pass it on)\n"
            f'START {{\n  recover cmd="ctl_cyrusdb {c} -r"\n}}\n'
            "SERVICES {\n"
            f'  imap cmd="imapd {c}" listen="{HOST}:{p.imap}" prefork=0\n'
            f'  http cmd="httpd {c}" listen="{HOST}:{p.http}" prefork=0\n'
            f'  https cmd="httpd -s {c}" listen="{HOST}:{p.https}" prefork=0\n'
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
            typ, data = m.append(_quote(mailbox), flag_list, date, raw)
            if typ != "OK":
                raise CyrusError(f"APPEND to {mailbox} failed: {data!r}")
            found = re.search(rb"APPENDUID \d+ (\d+)", data[0] or b"")
            if not found:
                raise CyrusError(f"no APPENDUID in {data!r}")
            uid = int(found.group(1))
            m.select(_quote(mailbox), readonly=True)
            email_id = self._emailid(m, uid)
        return Appended(user=user, mailbox=mailbox, uid=uid, message_id=mid, email_id=email_id)

    @staticmethod
    def _emailid(m: imaplib.IMAP4, uid: int) -> str:
        typ, data = m.uid("FETCH", str(uid), "(EMAILID)")
        blob = b" ".join(x if isinstance(x, bytes) else b" ".join(x) for x in data if x)
        found = re.search(rb"EMAILID \(([^)\s]+)\)", blob)
        if typ != "OK" or not found:
            raise CyrusError(f"FETCH EMAILID failed: {data!r}")
        return found.group(1).decode()

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


def new_base_dir(prefix: str = "mw-cyrus-") -> Path:
    """A fresh directory under the system temp dir that the `cyrus` user can reach."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


def remove_base_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
