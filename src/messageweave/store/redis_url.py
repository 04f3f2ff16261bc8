"""`REDIS_URL` for the three topologies (reference §4, §7.18): one server, a Redis Cluster, a
Sentinel set, and the redis-py asyncio client of each.

- `redis://`, `rediss://`, `unix://`: one server (`redis.asyncio.from_url`). `open_redis` also
  asks the server whether it is a cluster node (`INFO cluster`: `cluster_enabled:1`) and then
  answers a cluster client seeded with it: a cluster reached by a plain URL is never treated as
  one server (whose multi-key commands a cluster would refuse with MOVED).
- `redis+cluster://[user:pass@]h1:p1[,h2:p2…][?…]` (`rediss+cluster://` for TLS): redis-py's
  asyncio `RedisCluster`, every host a seed node.
- `redis+sentinel://[user:pass@]h1:26379[,h2:26379…]/<master>[?sentinel_password=…&db=…]`
  (`rediss+sentinel://` for TLS): redis-py's asyncio `Sentinel(…).master_for(<master>)`. The
  URL's user and password authenticate to the data nodes; `sentinel_username` and
  `sentinel_password` to the sentinels.

The TLS query fields of the single-server form (`ssl_cert_reqs`, `ssl_ca_certs`, `ssl_certfile`,
`ssl_keyfile`) apply to every node. Errors name the URL's shape, never its passwords.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import parse_qs, unquote, urlsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.sentinel import Sentinel

Redis = aioredis.Redis
CLUSTER_SCHEMES = frozenset({"redis+cluster", "rediss+cluster"})
SENTINEL_SCHEMES = frozenset({"redis+sentinel", "rediss+sentinel"})
CLUSTER_SLOTS = 16384
_TLS_FIELDS = ("ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
# Bounded connect and command timeouts for every node (fail fast, never hang).
TIMEOUTS: dict[str, Any] = {"socket_connect_timeout": 10, "socket_timeout": 30}
# One server's pool (`single_client`); REDIS_URL's `max_connections` overrides the size.
POOL_MAX_CONNECTIONS = 100
POOL_WAIT_S = 10.0


class RedisUrlError(ValueError):
    """A `REDIS_URL` of the cluster or sentinel form that cannot be used (its shape, never its
    passwords, in the message)."""


@dataclass(frozen=True)
class MultiNodeUrl:
    """A `redis+cluster://` or `redis+sentinel://` URL, parsed."""

    scheme: str
    hosts: tuple[tuple[str, int], ...]
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    master: str = ""  # sentinel: the monitored primary's name
    query: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def tls(self) -> bool:
        return self.scheme.startswith("rediss+")

    def node_options(self) -> dict[str, Any]:
        """Options for every data node: credentials, TLS, timeouts, text replies."""
        options: dict[str, Any] = {"username": self.username, "password": self.password,
                                   "decode_responses": True, **TIMEOUTS}
        if self.tls:
            options["ssl"] = True
            options.update({k: v for k, v in self.query.items() if k in _TLS_FIELDS})
        return options


def topology_of(url: str) -> str:
    """`cluster`, `sentinel` or `single`, from the URL's scheme alone."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme in CLUSTER_SCHEMES:
        return "cluster"
    return "sentinel" if scheme in SENTINEL_SCHEMES else "single"


def _port(text: str, scheme: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 < port < 65536:
        raise RedisUrlError(f"REDIS_URL ({scheme}://): a host's port must be 1 to 65535")
    return port


def parse_multi_node(url: str) -> MultiNodeUrl:
    """Parse a cluster or sentinel URL (`RedisUrlError` naming what is wrong)."""
    scheme, _, rest = url.partition("://")
    scheme = scheme.lower()
    if scheme not in CLUSTER_SCHEMES | SENTINEL_SCHEMES:
        raise RedisUrlError(f"REDIS_URL: not a cluster or sentinel URL ({scheme}://)")
    parts = urlsplit(f"x://{rest}")  # netloc with several hosts: split it ourselves
    credentials, _, hostlist = parts.netloc.rpartition("@")
    user, _, password = credentials.partition(":")
    default = 26379 if scheme in SENTINEL_SCHEMES else 6379
    hosts = []
    for item in filter(None, hostlist.split(",")):
        host, colon, port = item.rpartition(":") if not item.endswith("]") else (item, "", "")
        if not colon:
            host, port = item, str(default)
        if not host.strip("[]"):
            raise RedisUrlError(f"REDIS_URL ({scheme}://): a host is empty")
        hosts.append((host.strip("[]"), _port(port, scheme)))
    if not hosts:
        raise RedisUrlError(f"REDIS_URL ({scheme}://): name at least one host:port")
    master = unquote(parts.path.strip("/"))
    if scheme in SENTINEL_SCHEMES and (not master or "/" in master):
        raise RedisUrlError(f"REDIS_URL ({scheme}://): name the primary as the path, "
                            f"{scheme}://host:26379/<master>")
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    return MultiNodeUrl(scheme, tuple(hosts), unquote(user) or None,
                        unquote(password) if credentials else None,
                        master if scheme in SENTINEL_SCHEMES else "", query)


def _int_field(parsed: MultiNodeUrl, name: str, default: int) -> int:
    raw = parsed.query.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise RedisUrlError(f"REDIS_URL ({parsed.scheme}://): {name} must be an integer") from exc


def single_client(url: str) -> Redis:
    """One server's client. Its pool blocks when full: a command that finds its
    `POOL_MAX_CONNECTIONS` connections busy waits up to `POOL_WAIT_S` for one rather than
    failing with "Too many connections" at once (issue #37: the burst of every account's first
    pass at start-up)."""
    pool = aioredis.BlockingConnectionPool.from_url(
        url, decode_responses=True, health_check_interval=30,
        max_connections=POOL_MAX_CONNECTIONS, timeout=POOL_WAIT_S, **TIMEOUTS)
    return Redis.from_pool(pool)  # the client closes its pool


def cluster_client(parsed: MultiNodeUrl) -> Redis:
    """redis-py's asyncio `RedisCluster` over the URL's seed nodes. Typed as the single-server
    client: it answers every command the service sends (the cluster tests run them), and
    pipelines hold one slot each (reference §7.18)."""
    cluster = RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in parsed.hosts],
                           **parsed.node_options())
    return cast(Redis, cluster)


def sentinel_client(parsed: MultiNodeUrl) -> Redis:
    """The primary of the URL's sentinel set, as redis-py's `Sentinel.master_for` follows it:
    each new connection asks the sentinels where the primary is, so a failover is a reconnect."""
    sentinel_options: dict[str, Any] = {
        "username": parsed.query.get("sentinel_username"),
        "password": parsed.query.get("sentinel_password"), **TIMEOUTS}
    if parsed.tls:
        sentinel_options["ssl"] = True
        sentinel_options.update({k: v for k, v in parsed.query.items() if k in _TLS_FIELDS})
    sentinel = Sentinel(  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
        list(parsed.hosts), sentinel_kwargs=sentinel_options,
        **parsed.node_options())
    client: Redis = sentinel.master_for(parsed.master, db=_int_field(parsed, "db", 0),
                                        health_check_interval=30)
    return client


def multi_node_client(url: str) -> Redis:
    parsed = parse_multi_node(url)
    if parsed.scheme in CLUSTER_SCHEMES:
        return cluster_client(parsed)
    return sentinel_client(parsed)


def is_cluster(client: Redis) -> bool:
    """Whether `client` is redis-py's cluster client (a command names keys of one slot)."""
    return isinstance(client, RedisCluster)


def has_replicas(client: Redis) -> bool:
    """Whether `client` reaches a topology that fails over to a replica (a cluster, a Sentinel
    set): where `WAIT` can keep a write through a failover (§7.18)."""
    return is_cluster(client) or isinstance(
        getattr(client.connection_pool, "sentinel_manager", None), Sentinel)


async def initialized(client: Redis) -> None:
    """A cluster client's slot table, loaded now: redis-py's cluster pub/sub (`pubsub()` then
    `subscribe`) looks the channel's slot up in it and fails with a `KeyError` before the
    client's first command has loaded it. Safe to call again, and on any client."""
    if isinstance(client, RedisCluster):
        await client.initialize()


async def topology_text(client: Redis) -> str:
    """What `client` is connected to, for `messageweave diagnose`'s `redis` line: `single
    server`; `sentinel <master>: primary h:p, N replicas`; `cluster: N primaries, S of 16384
    slots covered` (as the node the client asks says). Raises `RedisError` as the commands do."""
    if isinstance(client, RedisCluster):
        await initialized(client)
        info = await client.cluster_info(target_nodes=RedisCluster.RANDOM)
        covered = info.get("cluster_slots_ok", "?")
        return (f"cluster: {len(client.get_primaries())} primaries, "
                f"{covered} of {CLUSTER_SLOTS} slots covered")
    manager = getattr(client.connection_pool, "sentinel_manager", None)
    if isinstance(manager, Sentinel):
        name = client.connection_pool.service_name  # type: ignore[attr-defined]
        host, port = await manager.discover_master(name)
        replicas = await manager.discover_slaves(name)
        return f"sentinel {name}: primary {host}:{port}, {len(replicas)} replicas"
    return "single server"
