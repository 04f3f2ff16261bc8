"""A real Sentinel set as a test peer: one primary and two replicas of Debian's redis-server,
watched by three redis-sentinel processes, all on loopback.

The data nodes require `DATA_PASSWORD` and the sentinels `SENTINEL_PASSWORD` (a different
one), as a careful operator sets them: the service's URL must send each to the right server.
Short timeouts (`down-after-milliseconds` 3000, `DOWN_AFTER_MS`) make the sentinels promote a
replica within seconds of `kill_primary`. Not shorter: with 1000 ms a sentinel once found the
primary it had just promoted silent for a second under load (it was syncing the other replica)
and failed over again, to that replica, before it had caught up: two seconds of acknowledged
writes lost and some 200 mails sent again (reference §7.18), a cascade a deployment's own
down-after (30 s by default) does not make. A missing binary is a failure with a remedy, never
a skip.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import redis

from messageweave.store.redis import die_with_parent
from tests.peers.cyrus import free_port
from tests.peers.redis7 import DEBIAN_REDIS, RedisNotInstalled, RedisProcess, stop_all

REDIS_SENTINEL = "/usr/bin/redis-sentinel"
MASTER = "mw-primary"
DATA_PASSWORD = "data@pw:1/x"  # URL-special characters: the URL must percent-encode them
SENTINEL_PASSWORD = "sentinel&pw=2"
HOST = "127.0.0.1"
START_TIMEOUT_S = 30.0
FAILOVER_TIMEOUT_S = 30.0
DOWN_AFTER_MS = 3000


@dataclass
class RedisSentinelPeer:
    data_nodes: list[RedisProcess]
    sentinels: list[RedisProcess] = field(default_factory=list)

    @property
    def url(self) -> str:
        hosts = ",".join(f"{HOST}:{s.port}" for s in self.sentinels)
        return (f"redis+sentinel://:{quote(DATA_PASSWORD, safe='')}@{hosts}/{MASTER}"
                f"?sentinel_password={quote(SENTINEL_PASSWORD, safe='')}")

    def primary(self) -> RedisProcess:
        """The data node the sentinels name as primary now (they agree: `_agreed`)."""
        port = self._agreed()
        if port is None:
            raise RuntimeError("the sentinels do not agree on a primary")
        return next(n for n in self.data_nodes if n.port == port)

    def _agreed(self) -> int | None:
        named = set()
        for sentinel in self.sentinels:
            if not sentinel.alive:
                continue
            with sentinel.client() as c:
                addr = c.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)
            if not addr:
                return None
            named.add(int(addr[1]))
        return named.pop() if len(named) == 1 else None

    def _settled(self, replicas: int) -> bool:
        """Every sentinel names the same live primary, which is a primary by its own account,
        sees `replicas` replicas up and the two other sentinels."""
        port = self._agreed()
        node = next((n for n in self.data_nodes if n.port == port and n.alive), None)
        if node is None:
            return False
        with node.client() as c:
            if c.info("replication").get("role") != "master":
                return False
        for sentinel in self.sentinels:
            with sentinel.client() as c:
                seen = c.execute_command("SENTINEL", "REPLICAS", MASTER)
                others = c.execute_command("SENTINEL", "SENTINELS", MASTER)
            up = [r for r in seen if _flags(r) == {"slave"}]
            if len(up) < replicas or len(others) < 2:
                return False
        return True

    def wait_settled(self, replicas: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(redis.RedisError, RuntimeError):
                if self._settled(replicas):
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the sentinels did not settle within {timeout} s")
            time.sleep(0.05)

    def kill_primary(self) -> RedisProcess:
        """`kill -9` the primary; `wait_failover` waits for the sentinels to promote a replica."""
        node = self.primary()
        node.proc.send_signal(signal.SIGKILL)
        node.proc.wait()
        return node

    def wait_failover(self, old: RedisProcess, timeout: float = FAILOVER_TIMEOUT_S) -> RedisProcess:
        """Until the sentinels agree on a new primary that says it is one, and its replica
        (the other survivor) is linked to it again."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(redis.RedisError, RuntimeError, StopIteration):
                if self._agreed() not in (None, old.port) and self._settled(replicas=1):
                    return self.primary()
            if time.monotonic() > deadline:
                raise TimeoutError(f"no failover within {timeout} s")
            time.sleep(0.05)

    def stop(self) -> None:
        stop_all(self.sentinels + self.data_nodes)


def _flags(reply: object) -> set[str]:
    """The `flags` of a SENTINEL REPLICAS entry (a flat list of names and values, or a dict)."""
    if isinstance(reply, dict):
        return set(str(reply.get("flags", "")).split(","))
    items = list(reply) if isinstance(reply, list) else []
    fields = dict(zip(items[::2], items[1::2], strict=False))
    return set(str(fields.get("flags", "")).split(","))


def _spawn(binary: str, conf: Path, text: str) -> subprocess.Popen[bytes]:
    conf.write_text(text)  # a sentinel rewrites its configuration file: it must be a file
    return subprocess.Popen([binary, str(conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL,
                            preexec_fn=die_with_parent)  # no orphan when pytest dies


def _data_node(base: Path, i: int, primary: int | None) -> RedisProcess:
    port = free_port(HOST)
    data = base / f"data{i}"
    data.mkdir(parents=True)
    text = (f'bind {HOST}\nport {port}\ndir "{data}"\nappendonly no\nsave ""\n'
            f'requirepass "{DATA_PASSWORD}"\nmasterauth "{DATA_PASSWORD}"\n'
            "daemonize no\nlogfile redis.log\n")
    if primary is not None:
        text += f"replicaof {HOST} {primary}\n"
    return RedisProcess(port, _spawn(DEBIAN_REDIS, data / "redis.conf", text), DATA_PASSWORD)


def _sentinel(base: Path, i: int, primary: int) -> RedisProcess:
    port = free_port(HOST)
    data = base / f"sentinel{i}"
    data.mkdir(parents=True)
    text = (f'bind {HOST}\nport {port}\ndir "{data}"\ndaemonize no\nlogfile sentinel.log\n'
            f'requirepass "{SENTINEL_PASSWORD}"\n'
            f"sentinel monitor {MASTER} {HOST} {primary} 2\n"
            f'sentinel auth-pass {MASTER} "{DATA_PASSWORD}"\n'
            f'sentinel sentinel-pass "{SENTINEL_PASSWORD}"\n'
            f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {MASTER} 5000\n"
            f"sentinel parallel-syncs {MASTER} 1\n")
    proc = _spawn(REDIS_SENTINEL, data / "sentinel.conf", text)
    return RedisProcess(port, proc, SENTINEL_PASSWORD)


def _wait_replicas(primary: RedisProcess, count: int, deadline: float) -> None:
    while True:
        with contextlib.suppress(redis.ConnectionError, redis.BusyLoadingError):
            with primary.client() as c:
                if c.info("replication").get("connected_slaves") == count:
                    return
        if not primary.alive or time.monotonic() > deadline:
            raise TimeoutError("the replicas did not link to the primary")
        time.sleep(0.02)


@contextlib.contextmanager
def running_sentinels(base: Path) -> Iterator[RedisSentinelPeer]:
    """A primary, two linked replicas, three sentinels that agree on the primary and see both
    replicas and each other. The replicas link before the sentinels start, so the sentinels'
    first INFO of the primary lists them (else they learn them only 10 s later)."""
    for binary in (DEBIAN_REDIS, REDIS_SENTINEL):
        if not os.path.exists(binary):
            raise RedisNotInstalled(f"{binary} is missing: run `sudo scripts/"
                                    "install-test-packages.sh` (scripts/test.sh does it as root)")
    deadline = time.monotonic() + START_TIMEOUT_S
    primary = _data_node(base, 0, None)
    peer = RedisSentinelPeer([primary])
    try:
        peer.data_nodes += [_data_node(base, i, primary.port) for i in (1, 2)]
        _wait_replicas(primary, 2, deadline)
        peer.sentinels = [_sentinel(base, i, primary.port) for i in range(3)]
        peer.wait_settled(replicas=2, timeout=max(0.0, deadline - time.monotonic()))
        yield peer
    finally:
        peer.stop()
