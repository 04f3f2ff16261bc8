"""Per-account fairness in the worker (issue #35, SPEC G.5), with the Bot API emulator's real
per-chat rate: one account's backlog does not hold back another account's new mail."""

from __future__ import annotations

import time

from messageweave.store import keys
from messageweave.store.mailbox import enqueue_new_mails
from tests.integration.accounts.conftest import add_account
from tests.peers.cyrus import CyrusServer
from tests.served import ServedApp

BACKLOG = 2000


async def test_a_backlog_in_one_account_does_not_hold_back_another_accounts_new_mail(
    served: ServedApp, cyrus: CyrusServer
) -> None:
    """Catches a worker that serves one account only (another account's mail stream never
    read), or one whose slots a single account's backlog can fill: 2,000 notifications to one
    chat wait in that chat's lane (about one message a second), each holding a slot, and the
    other account's new mail waited behind them."""
    await served.redis.delete(keys.GOVERNOR_LIMITS)  # Telegram's own: a chat ≤ 1 message/s
    big = await add_account(served, cyrus, "big", digest_threshold=0)
    family = await add_account(served, cyrus, "family", digest_threshold=0)
    mails = cyrus.append_many([f"backlog {n:04d}" for n in range(BACKLOG)], user=big.user)
    queued = await enqueue_new_mails(served.redis, big.user, [m.email_id for m in mails],
                                     names=big.keys)
    assert queued == BACKLOG
    await served.emulator.wait_for_messages(served.token, big.chat, 1, timeout_s=10)

    new = cyrus.append(subject="dinner at eight", user=family.user)
    started = time.monotonic()
    await enqueue_new_mails(served.redis, family.user, [new.email_id], names=family.keys)
    [sent] = await served.emulator.wait_for_messages(served.token, family.chat, 1,
                                                     timeout_s=2.0)
    took = time.monotonic() - started
    assert "dinner at eight" in sent.text, sent.text
    assert took < 2.0, f"the other account's mail took {took:.2f} s"
    assert len(await served.emulator.sent_messages(served.token, big.chat)) < BACKLOG / 4
