"""Which peer delivery is waiting for, and since when (issue #22; docs/reference.md §7.11).

An entry whose last attempt failed because Telegram or the mail server was out of reach
(connection refused or reset, DNS, a timeout, a 5xx) waits for that peer, with capped backoff,
for up to `retry_window_s`. While it does, it is a member `{stream}/{entry_id}` of
`delivery:waiting:{peer}:{stream}` (one set per peer and stream, in the stream's slot: issue
#35), scored with since when it has waited for that peer. The ledger's
scripts keep these sets: `RETRY_OR_DLQ` adds the entry (and takes it out of the other peer's),
`COMMIT` and the dead letter take it out. `waiting_for_peers` reads them, every account's,
for `/ready` and `diagnose`.
"""

from __future__ import annotations

from dataclasses import dataclass

from messageweave.store import keys
from messageweave.store.redis import Redis

TELEGRAM = "telegram"
JMAP = "jmap"
PEERS = (TELEGRAM, JMAP)
LABELS = {TELEGRAM: "Telegram", JMAP: "the mail server"}


def member(stream: str, entry_id: str) -> str:
    return f"{stream}/{entry_id}"


def waiting_keys(stream: str) -> list[str]:
    """`stream`'s waiting set of each peer, in the order of `PEERS` (the ledger's scripts take
    them so)."""
    return [keys.delivery_waiting(peer, stream) for peer in PEERS]


def peer_position(peer: str | None) -> int:
    """The scripts' peer argument: 1-based position in `PEERS`, 0 for no peer."""
    return PEERS.index(peer) + 1 if peer in PEERS else 0


@dataclass(frozen=True)
class Waiting:
    """Entries waiting for one peer: how many, and since when the longest-waiting one has."""

    peer: str
    since: int  # Unix seconds
    entries: int

    def as_json(self) -> dict[str, int]:
        return {"since": self.since, "entries": self.entries}


async def every_stream(redis: Redis) -> list[str]:
    """Every account's mail stream (`default`'s first, the others of the accounts' index in id
    order) and the chat stream: the sets `/ready` and `diagnose` read (issue #35)."""
    others = sorted(str(i) for i in await redis.smembers(keys.ACCOUNTS_INDEX))
    return [keys.STREAM_JMAP, *(keys.AccountKeys(i).stream_jmap for i in others),
            keys.STREAM_TELEGRAM]


async def waiting_for_peers(redis: Redis) -> dict[str, Waiting]:
    """Each peer something of any account waits for (none: absent), in two round trips (the
    accounts' index, then the sets): `jmap` is any account's mail server."""
    sets = [(peer, key) for stream in await every_stream(redis)
            for peer, key in zip(PEERS, waiting_keys(stream), strict=True)]
    async with redis.pipeline(transaction=False) as pipe:
        for _peer, key in sets:
            pipe.zrange(key, 0, 0, withscores=True)
            pipe.zcard(key)
        replies = await pipe.execute()
    out: dict[str, Waiting] = {}
    for n, (peer, _key) in enumerate(sets):
        first, count = replies[2 * n], int(replies[2 * n + 1] or 0)
        if first and count:
            since = int(float(first[0][1]))
            if peer in out:
                since, count = min(since, out[peer].since), count + out[peer].entries
            out[peer] = Waiting(peer, since, count)
    return out
