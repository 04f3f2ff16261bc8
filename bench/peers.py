"""The real peers both benchmarks run against: embedded Redis, Cyrus and the Bot API emulator."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import CYRUS_PASSWORD, CYRUS_USER
from tests.peers.cyrus import CyrusServer, new_base_dir, remove_base_dir
from tests.peers.telegram import TelegramEmulator

from messageweave.store.redis import EmbeddedRedis


@dataclass(frozen=True)
class Peers:
    redis_url: str
    cyrus: CyrusServer
    emulator: TelegramEmulator


@contextlib.contextmanager
def started_peers(prefix: str, *, embedded_redis: bool = True) -> Iterator[Peers]:
    """Start the three peers (Cyrus's CA trusted process-wide), stop and remove them after.
    Without `embedded_redis` no Redis (`redis_url` is empty): the caller brings its own."""
    data = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    redis_server = EmbeddedRedis(data / "redis") if embedded_redis else None
    url = redis_server.start() if redis_server is not None else ""
    base = new_base_dir()
    cyrus = CyrusServer(base, users={CYRUS_USER: CYRUS_PASSWORD})
    cyrus.start()
    emulator = TelegramEmulator.start(data / "logs")
    os.environ["SSL_CERT_FILE"] = str(cyrus.ca_file)
    try:
        yield Peers(url, cyrus, emulator)
    finally:
        emulator.stop()
        cyrus.stop()
        remove_base_dir(base)
        if redis_server is not None:
            redis_server.stop()
        shutil.rmtree(data, ignore_errors=True)
