"""The one way to run a Lua script: `Script`, a script declared with the names of its KEYS and
ARGV, and called with named keys and arguments.

Each multi-key change that must be atomic is one script, a module-level `Script` next to the
code that calls it, opening with its comment (`# KEYS: …`, `# ARGV: …`, `# → …`) whose names
are the declared ones, in order (a unit test compares them). A call names every key and
argument: a missing or an extra name raises `TypeError` before anything reaches Redis, so the
order of the Lua's `KEYS[n]` and `ARGV[n]` is written down, and checked, in one place. The
KEYS of a call must all be in one Redis Cluster slot (issue #35, reference §1.0): keys of
different slots raise `CrossSlot`, also before anything reaches Redis, so every test that runs
a script checks its keys, on a single Redis as much as on a cluster.

A script runs as redis-py's `register_script` runs it: EVALSHA, and on NOSCRIPT (a Redis that
has not seen it since its start) the text is loaded and run again. In a pipeline
(`Script.queue`) the text goes with the call (EVAL): redis-py would otherwise ask SCRIPT
EXISTS before every execute, one more round trip.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from messageweave.store.redis import Redis
from messageweave.store.redis_url import has_replicas, initialized

Arg = str | int | float
Value = Arg | Sequence[Arg]
# A declared name ending in this takes a list, spread in place: the script's variadic tail.
MANY = "*"
# `Script.replicated`: how long a write waits for one replica's acknowledgement (§7.18).
REPLICA_WAIT_MS = 50


class CrossSlot(ValueError):
    """A script's KEYS span more than one cluster slot: a Redis Cluster would refuse the call."""


def one_slot(names: Sequence[str]) -> None:
    """Raise `CrossSlot` unless every key of `names` hashes to the same slot (its hash tag)."""
    slots = {key_slot(name.encode()) for name in names}
    if len(slots) > 1:
        raise CrossSlot(f"keys in {len(slots)} slots: {list(names)}")


class Script:
    """A Lua script and the names of its KEYS and of its ARGV, in the order the Lua reads them.
    At most the last name of each may end in `*`: it takes a list (the rest of KEYS or ARGV)."""

    def __init__(self, source: str, *, keys: Sequence[str] = (), args: Sequence[str] = ()) -> None:
        self.source = source
        self.keys = tuple(keys)
        self.args = tuple(args)
        for names in (self.keys, self.args):
            if any(name.endswith(MANY) for name in names[:-1]):
                raise ValueError(f"only the last name may take a list: {names}")

    async def __call__(self, redis: Redis, *, keys: Mapping[str, Value] | None = None,
                       args: Mapping[str, Value] | None = None) -> Any:
        """Run the script (EVALSHA, EVAL-and-load on NOSCRIPT); its reply as redis-py gives it."""
        names, values = self._flatten(keys, args)
        return await redis.register_script(self.source)(names, values, client=redis)

    async def replicated(self, redis: Redis, *, keys: Mapping[str, Value] | None = None,
                         args: Mapping[str, Value] | None = None) -> Any:
        """`__call__`, then `WAIT` until one replica has the script's writes (at most
        `REPLICA_WAIT_MS`), on the connection and node that ran it: for a write whose loss in
        a failover would lose a message or repeat one unseen (reference §7.18). Without
        replicas to fail over to (`has_replicas`: a single server) it is `__call__` alone.
        A replica that does not answer in time does not stop the caller: the reply is
        returned either way (a write is never refused for want of a replica)."""
        if not has_replicas(redis):
            return await self(redis, keys=keys, args=args)
        names, values = self._flatten(keys, args)
        await initialized(redis)  # the key's node is looked up before the first command
        target: dict[str, Any] = ({"target_nodes": redis.get_node_from_key(names[0])}
                                  if isinstance(redis, RedisCluster) else {})
        pipe = redis.pipeline(transaction=False)
        pipe.eval(self.source, len(names), *names, *values)
        pipe.execute_command("WAIT", 1, REPLICA_WAIT_MS, **target)
        reply, _acked = await pipe.execute()
        return reply

    def queue(self, pipe: Pipeline, *, keys: Mapping[str, Value] | None = None,
              args: Mapping[str, Value] | None = None) -> None:
        """Queue the script on `pipe` (its reply comes with the pipeline's)."""
        names, values = self._flatten(keys, args)
        pipe.eval(self.source, len(names), *names, *values)

    def _flatten(self, keys: Mapping[str, Value] | None,
                 args: Mapping[str, Value] | None) -> tuple[list[str], list[Arg]]:
        names = [str(key) for key in _in_order("KEYS", self.keys, keys or {})]
        one_slot(names)
        return names, _in_order("ARGV", self.args, args or {})


def _in_order(part: str, declared: tuple[str, ...], given: Mapping[str, Value]) -> list[Arg]:
    """`given`'s values in `declared`'s order, a list spread in place of a `*` name."""
    bare = [name.removesuffix(MANY) for name in declared]
    missing = [name for name in bare if name not in given]
    extra = sorted(set(given) - set(bare))
    if missing or extra:
        raise TypeError(f"{part}: missing {missing}, unexpected {extra} (declared: {declared})")
    out: list[Arg] = []
    for name, plain in zip(declared, bare, strict=True):
        value = given[plain]
        one = isinstance(value, str | int | float)
        if one == name.endswith(MANY):
            raise TypeError(f"{part} {plain!r}: {'one value' if one else 'a list'} given")
        if isinstance(value, str | int | float):
            out.append(value)
        else:
            out += value
    return out
