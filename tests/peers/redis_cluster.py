"""A real Redis Cluster as a test peer: three primaries and three replicas of Debian's
redis-server on loopback, made one cluster by `redis-cli --cluster create … --cluster-replicas 1`.

Every node requires a password (`PASSWORD`, and `masterauth` for its replica link), so the
service's URL carries one as an operator's would. The bus port of each node is a free port of
its own (`cluster-port`), not port+10000, which may be taken. A short `cluster-node-timeout`
makes a replica take over within seconds of `kill_primary_of`. A missing server is a failure
with a remedy, never a skip.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import redis
from redis.crc import key_slot

from messageweave.store.redis import die_with_parent
from tests.peers.cyrus import free_port
from tests.peers.redis7 import DEBIAN_REDIS, RedisNotInstalled, RedisProcess, stop_all

REDIS_CLI = "/usr/bin/redis-cli"
PASSWORD = "cl@ster:pw/42"  # URL-special characters: the URL must percent-encode them
HOST = "127.0.0.1"
NODE_TIMEOUT_MS = 1000
START_TIMEOUT_S = 30.0
FAILOVER_TIMEOUT_S = 30.0


@dataclass
class RedisClusterPeer:
    nodes: list[RedisProcess]

    @property
    def url(self) -> str:
        """`redis+cluster://` with every node as a seed and the password percent-encoded."""
        seeds = ",".join(f"{HOST}:{n.port}" for n in self.nodes)
        return f"redis+cluster://:{quote(PASSWORD, safe='')}@{seeds}"

    @property
    def plain_url(self) -> str:
        """A plain `redis://` URL of one node: the service must find out it is a cluster."""
        node = self.live()[0]
        return f"redis://:{quote(PASSWORD, safe='')}@{HOST}:{node.port}/0"

    def live(self) -> list[RedisProcess]:
        return [n for n in self.nodes if n.alive]

    def primary_of(self, key: str) -> RedisProcess:
        """The live node that serves `key`'s slot now."""
        slot = key_slot(key.encode())
        for node in self.live():
            with node.client() as c:
                for start, end, primary, *_ in c.execute_command("CLUSTER", "SLOTS"):
                    if start <= slot <= end:
                        port = int(primary[1])
                        return next(n for n in self.nodes if n.port == port)
        raise RuntimeError(f"no node serves slot {slot}")

    def kill_primary_of(self, key: str) -> RedisProcess:
        """`kill -9` the primary of `key`'s slot; `wait_failover` waits for its replica."""
        node = self.primary_of(key)
        node.proc.send_signal(signal.SIGKILL)
        node.proc.wait()
        return node

    def wait_failover(self, key: str, timeout: float = FAILOVER_TIMEOUT_S) -> RedisProcess:
        """Until a live replica serves `key`'s slot and every live node says the cluster is ok."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(redis.RedisError, RuntimeError, StopIteration):
                node = self.primary_of(key)
                if node.alive and _all_ok(self.live()):
                    return node
            if time.monotonic() > deadline:
                raise TimeoutError(f"no failover of {key!r}'s slot within {timeout} s")
            time.sleep(0.05)

    def stop(self) -> None:
        stop_all(self.nodes)


def _all_ok(nodes: list[RedisProcess]) -> bool:
    for node in nodes:
        cluster = node.info("cluster")
        if cluster.get("cluster_enabled") != 1:
            return False
        with node.client() as c:
            state = c.execute_command("CLUSTER", "INFO")
        text = state if isinstance(state, str) else str(state)
        if "cluster_state:ok" not in text or "cluster_slots_ok:16384" not in text:
            return False
    return True


def _start_node(data: Path) -> RedisProcess:
    port, bus = free_port(HOST), free_port(HOST)
    data.mkdir(parents=True)
    proc = subprocess.Popen(
        [DEBIAN_REDIS, "-"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, preexec_fn=die_with_parent)  # no orphan when pytest dies
    conf = (f'bind {HOST}\nport {port}\ncluster-port {bus}\ndir "{data}"\n'
            "cluster-enabled yes\ncluster-config-file nodes.conf\n"
            f"cluster-node-timeout {NODE_TIMEOUT_MS}\nappendonly no\nsave \"\"\n"
            f'requirepass "{PASSWORD}"\nmasterauth "{PASSWORD}"\n'
            "daemonize no\nlogfile redis.log\n")
    assert proc.stdin is not None
    with proc.stdin:
        proc.stdin.write(conf.encode())
    return RedisProcess(port, proc, PASSWORD)


def _wait_ping(nodes: list[RedisProcess], deadline: float) -> None:
    for node in nodes:
        while True:
            try:
                with node.client() as c:
                    if c.ping():
                        break
            except redis.ConnectionError:
                if not node.alive or time.monotonic() > deadline:
                    raise
            time.sleep(0.02)


@contextlib.contextmanager
def running_cluster(base: Path) -> Iterator[RedisClusterPeer]:
    """Three primaries, three replicas, every slot covered, every node `cluster_state:ok`."""
    for binary in (DEBIAN_REDIS, REDIS_CLI):
        if not os.path.exists(binary):
            raise RedisNotInstalled(f"{binary} is missing: run `sudo scripts/"
                                    "install-test-packages.sh` (scripts/test.sh does it as root)")
    deadline = time.monotonic() + START_TIMEOUT_S
    peer = RedisClusterPeer([_start_node(base / f"node{i}") for i in range(6)])
    try:
        _wait_ping(peer.nodes, deadline)
        subprocess.run(
            [REDIS_CLI, "--cluster", "create", *(f"{HOST}:{n.port}" for n in peer.nodes),
             "--cluster-replicas", "1", "--cluster-yes"],
            env={**os.environ, "REDISCLI_AUTH": PASSWORD}, check=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=START_TIMEOUT_S)
        while not _all_ok(peer.nodes) or not _replicas_linked(peer.nodes):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the cluster is not ok within {START_TIMEOUT_S} s")
            time.sleep(0.05)
        yield peer
    finally:
        peer.stop()


def _replicas_linked(nodes: list[RedisProcess]) -> bool:
    """Every replica's link to its primary is up (a failover needs a synced replica)."""
    roles = [n.info("replication") for n in nodes]
    replicas = [r for r in roles if r.get("role") == "slave"]
    return len(replicas) == 3 and all(r.get("master_link_status") == "up" for r in replicas)
