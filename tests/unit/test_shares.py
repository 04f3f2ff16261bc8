"""How the worker's slots are shared between accounts (`pipeline.shares`, issue #35, SPEC G.5):
the arithmetic the worker's read and maintenance pass act on. The integration tests
(`tests/integration/accounts/test_fairness_many.py`) show the same against real hanging mail
servers; these cover the account counts a test cannot serve."""

from __future__ import annotations

from messageweave.pipeline import shares
from messageweave.store import keys
from messageweave.store.account_keys import AccountKeys

CONCURRENCY = 64


def _mail(count: int) -> list[str]:
    return [AccountKeys(f"a{n}").stream_jmap for n in range(count)]


def test_slots_taken_above_a_share_are_free_for_the_others() -> None:
    """Catches slots an account took while its share was larger counted against the others:
    three hanging accounts that came one after another held 32, 21 and 11 of 64, and a fourth
    account's mail found no free slot. Counted at their shares of now (12 each among five
    mail streams), they leave the fourth its share and more."""
    streams = [*_mail(5), keys.STREAM_TELEGRAM]
    held = dict(zip(streams[:3], (32, 21, 11), strict=True))
    free = shares.capacity(streams, CONCURRENCY) - shares.taken(streams, held, CONCURRENCY)
    assert free >= shares.share(CONCURRENCY, streams[4], 5) == 12
    assert free >= shares.batch(streams, CONCURRENCY)
    found, count = shares.readable(streams, held, CONCURRENCY, free)
    assert streams[4] in found and count >= 1
    assert streams[0] not in found  # over its share: not read


def test_a_stream_no_longer_read_takes_no_slot() -> None:
    """Catches a paused or deleted account's attempts, running on, counted against the
    accounts still served."""
    gone, *served = [*_mail(3), keys.STREAM_TELEGRAM]
    taken = shares.taken(served, {gone: 64}, CONCURRENCY)
    assert taken == 0


def test_past_the_slots_each_account_still_has_one() -> None:
    """Catches more accounts than slots: with 66 accounts a share is one slot, and 65 whose
    mail servers hang, at one each, filled all 64; the 66th account's mail was never read.
    There are as many slots as accounts then."""
    streams = [*_mail(66), keys.STREAM_TELEGRAM]
    held = {s: 1 for s in streams[:65]}
    free = shares.capacity(streams, CONCURRENCY) - shares.taken(streams, held, CONCURRENCY)
    assert 1 <= shares.batch(streams, CONCURRENCY) <= free
    assert streams[65] in shares.readable(streams, held, CONCURRENCY, free)[0]
