"""Per-account fairness with many accounts (issue #37 item 4): every account that hangs holds
its share of the worker's slots and no more, and what the shares leave free is enough for the
worker to read another account's new mail."""

from __future__ import annotations

import time

from messageweave.pipeline.worker import WorkerOptions
from messageweave.store.mailbox import enqueue_new_mails
from messageweave.store.streams import StreamStore
from tests.helpers import eventually
from tests.integration.accounts.conftest import add_account
from tests.integration.accounts.test_fairness import blackhole
from tests.peers.cyrus import CyrusServer
from tests.served import ServedApp

HANGING = 7  # with `default` and the family, 9 mail streams: a share of 64 // 9 = 7 slots
STUCK = 20  # each hanging account's queued mails: more than its share


async def test_many_hanging_mail_servers_at_their_share_leave_another_account_room(
    served: ServedApp, cyrus: CyrusServer
) -> None:
    """Catches a worker whose read waited for a quarter of its slots (16 of 64) to be free:
    seven accounts whose mail server hangs, each holding its share (7 slots, every attempt
    waiting out the mail timeout), left 15 free, and another account's new mail was not even
    read until their attempts timed out (10 s here, 15 s by default)."""
    async with blackhole() as port:
        hanging = [await add_account(served, cyrus, f"dead{n}",
                                     jmap_session_url=f"https://127.0.0.1:{port}/")
                   for n in range(HANGING)]
        family = await add_account(served, cyrus, "family")
        streams = StreamStore(served.redis)
        # A read already waiting (XREADGROUP BLOCK) when the last accounts came counted fewer
        # accounts, so larger shares (one account over its share: not this case). Once the
        # family's first mail is sent, every read counts them all.
        first = cyrus.append(subject="lunch at noon", user=family.user)
        await enqueue_new_mails(served.redis, family.user, [first.email_id], names=family.keys)
        await served.emulator.wait_for_messages(served.token, family.chat, 1, timeout_s=10)
        share = WorkerOptions().concurrency // (HANGING + 2)
        for account in hanging:
            stuck = [f"M{n:024x}" for n in range(STUCK)]
            assert await enqueue_new_mails(served.redis, account.user, stuck,
                                           names=account.keys) == STUCK

        async def each_at_its_share() -> bool:
            pending = [(await streams.stats(a.keys.stream_jmap))["pending"] for a in hanging]
            return all(p >= share for p in pending)

        await eventually(each_at_its_share, "every hanging account's share of the slots taken")
        subject = "dinner at eight"
        new = cyrus.append(subject=subject, user=family.user)
        started = time.monotonic()
        await enqueue_new_mails(served.redis, family.user, [new.email_id], names=family.keys)
        sent = await served.emulator.wait_for_messages(served.token, family.chat, 2,
                                                       timeout_s=2.0)
        took = time.monotonic() - started
        assert [m for m in sent if subject in m.text], f"{len(sent)} messages, not the mail's"
        assert took < 2.0, f"the family's mail took {took:.2f} s"
