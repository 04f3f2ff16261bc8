"""Benchmark (not a test): a noisy neighbour on one instance (issue #35's check, issue #37 item
4). The measured account's new mail → chat, alone and beside its neighbours, in one run.

    .venv/bin/python -m bench.accounts --mails 30 --phases alone,blackhole
    .venv/bin/python -m bench.accounts --mails 30 --phases alone,backlog,both

Starts Dovecot 2.3, an embedded Redis, the Bot API emulator and `messageweave serve` (its own
process), configured as `bench.account_series` says (the measured account `default`, its IDLE
floor beside it; `reconcile_interval_s` 10, the least allowed: deployment-wide, so every
account runs a periodic pass every 10 s, the blackholed one included). Then, for each phase,
its neighbours are put in place and `--mails` new mails of the measured account are timed,
1,618 ms apart, beside the floor:

- `alone`: no other account.
- `blackhole`: account `ghost1` (`--ghosts` such accounts), whose IMAP server is a blackhole:
  a TCP listener in this process that accepts every connection and never answers, not even
  the TLS handshake. `--stuck` of its mails (200, more than the worker's 64 slots) are queued
  at once, so the worker takes as many as the account's share lets it and each attempt waits
  out the IMAP timeout (`jmap_timeout_ms`, 15 s) holding a slot; its scheduler's periodic pass
  hangs on the listener too.
- `backlog`: an account of the Dovecot user `big` with `--backlog` mails (5,000) in its
  INBOX, all queued for its one chat at once, digest off (`digest_threshold` 0), by the mail
  store's own stream write (`store.mail_entries.enqueue_new_mails`, the reconcile's: each mail's
  dedup claim and one entry per mail, 512 mails per script). The governor is in force and the
  emulator's per-chat rate is real, so `big` drains at about one message a second and its
  backlog lasts the whole run (its chat's first message is awaited before the series starts).
- `both`: the blackholed and the backlog accounts together (issue #37 item 4's third account).

With `--ghosts 3` the blackholed accounts come one after another, each taking the share it has
then (32, 21, 16 of the worker's 64 slots) and keeping it while its server hangs: the case of
reference §7.16 where the shares no longer leave the measured account a slot.

A phase keeps the neighbours of the phases before it (`alone,blackhole` and
`alone,backlog,both` are two runs): an account deleted while its mail server hangs is no
neighbour to measure beside, its attempts go on holding the worker's slots after the deletion
(in the first runs the next phase's mails took 14 s; reported with issue #37's figures). Each
neighbour added gets a fresh id (`ghost1`, `big2`…). Prints each series and a
`SUMMARY accounts:` line.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import socket
import tempfile
import time
from pathlib import Path

from bench.account_series import Bench, Series, add_account, bench, dovecot_user, series
from bench.imap_delivery import started_peers
from tests.integration.accounts.test_fairness import blackhole
from tests.peers.cyrus import make_message

from messageweave.mail.imap.ids import mail_id
from messageweave.store.keys import AccountKeys
from messageweave.store.mail_entries import enqueue_new_mails
from messageweave.store.streams import StreamStore

GHOST, BIG = "ghost", "big"  # the neighbours' kinds (and the backlog's Dovecot user)
NEIGHBOURS = {"alone": (), "blackhole": (GHOST,), "backlog": (BIG,), "both": (GHOST, BIG)}


def fill_inbox(b: Bench, user: str, count: int) -> list[str]:
    """`count` mails APPENDed to `user`'s INBOX over one connection; their mail ids (as the
    IMAP source names them: mailbox, UIDVALIDITY, UID)."""
    with b.dovecot.imap(user) as m:
        m.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # see CyrusServer.imap
        for n in range(count):
            typ, _ = m.append("INBOX", None, None, make_message(subject=f"backlog {n:05d}"))
            assert typ == "OK", f"APPEND {n} failed"
        m.select("INBOX", readonly=True)
        validity = int(m.response("UIDVALIDITY")[1][0])
        typ, data = m.uid("SEARCH", "ALL")
    return [mail_id("INBOX", validity, int(uid)) for uid in (data[0] or b"").split()]


class Neighbours:
    """The neighbour accounts in place, by kind (`ghost1`…, `big2`…)."""

    def __init__(self, b: Bench, port: int, args: argparse.Namespace) -> None:
        self.b, self.port, self.args = b, port, args
        self.ids: dict[str, list[str]] = {GHOST: [], BIG: []}
        self.big_ids: list[str] = []  # the backlog's mail ids in its INBOX
        self.big_chat = 0
        self._made = 0

    def _new_id(self, kind: str) -> str:
        self._made += 1
        return f"{kind}{self._made}"

    async def arrange(self, wanted: tuple[str, ...]) -> None:
        if GHOST in wanted and not self.ids[GHOST]:
            for _ in range(self.args.ghosts):
                await self._add_ghost()
        if BIG in wanted and not self.ids[BIG]:
            await self._add_big()

    async def _add_ghost(self) -> None:
        account = self._new_id(GHOST)
        await add_account(self.b, account, imap_port=self.port)
        self.ids[GHOST].append(account)
        stuck = self.args.stuck
        names = AccountKeys(account)
        ids = [mail_id("INBOX", 1, n + 1) for n in range(stuck)]
        assert await enqueue_new_mails(self.b.redis, account, ids, names=names) == stuck
        streams = StreamStore(self.b.redis)
        for _ in range(300):  # the worker is working on them (and waiting)
            if (await streams.stats(names.stream_jmap))["pending"] > 0:
                return
            await asyncio.sleep(0.1)
        print(f"  the worker took none of {account}'s mail within 30 s", flush=True)

    async def _add_big(self) -> None:
        account = self._new_id(BIG)
        self.big_chat = await add_account(self.b, account, user=BIG, digest_threshold=0)
        self.ids[BIG].append(account)
        started = time.monotonic()
        assert await enqueue_new_mails(self.b.redis, BIG, self.big_ids,
                                       names=AccountKeys(account)) == len(self.big_ids)
        await self.b.peers.emulator.wait_for_messages(self.b.bot, self.big_chat, 1,
                                                      timeout_s=60)
        print(f"{len(self.big_ids)} mails of {account} queued; its first message after "
              f"{time.monotonic() - started:.1f} s", flush=True)

    async def big_sent(self) -> int:
        if not self.big_chat:
            return 0
        return len(await self.b.peers.emulator.sent_messages(self.b.bot, self.big_chat))


async def run(args: argparse.Namespace) -> None:
    log = Path(tempfile.mkstemp(prefix="mwa-serve-", suffix=".log")[1])
    results: list[Series] = []
    with started_peers("dovecot") as peers:
        async with blackhole() as port, bench(peers, log, reconcile_interval_s=10) as b:
            near = Neighbours(b, port, args)
            if any(BIG in NEIGHBOURS[p] for p in args.phases):
                dovecot_user(b, BIG)
                started = time.monotonic()
                near.big_ids = await asyncio.to_thread(fill_inbox, b, BIG, args.backlog)
                print(f"{len(near.big_ids)} mails appended to {BIG}'s INBOX in "
                      f"{time.monotonic() - started:.0f} s", flush=True)
            for phase in args.phases:
                wanted = NEIGHBOURS[phase]
                await near.arrange(wanted)
                label = f"{phase} ({', '.join(b.accounts) or 'no other account'})"
                sent_before, started = await near.big_sent(), time.monotonic()
                results.append(await series(b, label, args.mails))
                print(results[-1].line(), flush=True)
                if BIG in wanted:
                    sent = await near.big_sent()
                    print(f"  the backlog meanwhile: {sent - sent_before} messages in "
                          f"{time.monotonic() - started:.0f} s, {sent} of "
                          f"{len(near.big_ids)} so far", flush=True)
    print(f"the app's log: {log}")
    print("SUMMARY accounts: " + json.dumps([s.summary() for s in results]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mails", type=int, default=30, help="per phase")
    parser.add_argument("--phases", type=lambda text: text.split(","),
                        default=["alone", "backlog", "both"],
                        help=f"comma-separated, of {', '.join(NEIGHBOURS)}")
    parser.add_argument("--stuck", type=int, default=200,
                        help="each blackholed account's mails queued")
    parser.add_argument("--ghosts", type=int, default=1,
                        help="blackholed accounts in the blackhole and both phases")
    parser.add_argument("--backlog", type=int, default=5000,
                        help="the backlog account's mails queued")
    args = parser.parse_args()
    unknown = [p for p in args.phases if p not in NEIGHBOURS]
    if unknown:
        parser.error(f"unknown phase {unknown[0]}")
    for before, after in itertools.pairwise(args.phases):
        if not set(NEIGHBOURS[before]) <= set(NEIGHBOURS[after]):
            parser.error(f"{after} after {before}: a phase may only add neighbours (see the "
                         "module's doc)")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
