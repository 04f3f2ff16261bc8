"""How the worker's slots are shared between the accounts (issue #35, SPEC G.5; issue #37).

Each account's mail stream may hold only its share of the slots (`share`), so a backlog of one
account, whose entries wait in its chat's lane each holding a slot, never keeps another
account's new mail from being read and run (`readable`); and the read's wait for a batch never
asks for more free slots than the other accounts leave (`batch`). The slots a stream holds
count against the others only up to its share of now (`taken`): what an account took while its
share was larger (fewer accounts then), and what a stream no longer read holds (a paused or
deleted account), is given back to the others at once, although those attempts run on (their
mail server hangs, each waits out its timeout and its retries, holding its chat's lane) until
they end.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from messageweave.store.streams import is_mail_stream

READ_BATCH_DIVISOR = 4  # the continuous worker reads once concurrency / 4 slots are free


def share(concurrency: int, stream: str, mail_streams: int) -> int:
    """The slots one stream may hold: all of them for the chat stream and for the only mail
    stream, else an equal part for each mail stream (at least one)."""
    if not is_mail_stream(stream) or mail_streams <= 1:
        return concurrency
    return max(1, concurrency // mail_streams)


def rooms(streams: Sequence[str], held: Mapping[str, int], concurrency: int) -> dict[str, int]:
    """How many more entries each of `streams` may run: its share less those it runs (the read
    and the maintenance pass's recovery both stop a stream there)."""
    mail_streams = sum(1 for s in streams if is_mail_stream(s))
    return {s: share(concurrency, s, mail_streams) - held.get(s, 0) for s in streams}


def readable(streams: Sequence[str], held: Mapping[str, int], concurrency: int,
             free: int) -> tuple[list[str], int]:
    """The streams with room for another entry, and how many to read from each: no stream is
    read past its share."""
    room = rooms(streams, held, concurrency)
    found = [s for s in streams if room[s] > 0]
    return found, min([max(1, free), *(room[s] for s in found)])


def capacity(streams: Sequence[str], concurrency: int) -> int:
    """The slots there are: `concurrency`, or one per mail stream when there are more (each
    account's share is at least one slot, so accounts past `concurrency` whose mail servers
    hang, each at its one slot, never fill them all)."""
    return max(concurrency, sum(1 for s in streams if is_mail_stream(s)))


def taken(streams: Sequence[str], held: Mapping[str, int], concurrency: int) -> int:
    """The slots taken as the other streams see them: each of `streams`' entries running, up to
    its share; a stream not in `streams` (an account paused or deleted) counts for nothing."""
    mail_streams = sum(1 for s in streams if is_mail_stream(s))
    return sum(min(held.get(s, 0), share(concurrency, s, mail_streams)) for s in streams)


def batch(streams: Sequence[str], concurrency: int) -> int:
    """The free slots the read waits for: a quarter of them (a busy worker reads, and fetches
    the mail of, several entries at once rather than one per finished task), but no more than
    the other accounts leave one account, each at its share (`taken` counts none above it).
    Waiting for more would hold another account's new mail until one of their attempts ended:
    five hanging mail servers at their shares, or one that kept 32 slots beside two more."""
    mail = [s for s in streams if is_mail_stream(s)]
    each = share(concurrency, mail[0], len(mail)) if mail else concurrency
    left = capacity(streams, concurrency) - each * (len(mail) - 1) if mail else concurrency
    return max(1, min(concurrency // READ_BATCH_DIVISOR, left))
