"""What the benches of several accounts on one instance share (issues #35, #37; not a test):
the measured account, its floor, a series of new mails timed to the chat, and more accounts.

The measured account is `default`: Dovecot's `alice` over IMAPS, its IDLE holder bringing the
mail (`bench.imap_delivery`'s wire: `reconcile_interval_s` and `audit_interval_s` as given,
the governor in force), so the figure is the one of issue #33's row. Another account is
measured the same way once its push is held (reference §7.16: today it gets mail by its
periodic pass and catch-up flag, a pass every `reconcile_interval_s` ≥ 10 s: no figure to
compare with a floor). The floor, same run: a bare IDLE client on the same mailbox that
sends one bare `sendMessage` each time IDLE ends on EXISTS (`bench.imap_delivery.Floor`):
both hear Dovecot's one notification, so ours − floor per mail is our path alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import statistics
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis.asyncio as aioredis
from bench.imap_delivery import (
    CHAT,
    FLOOR_CHAT,
    USER,
    Floor,
    Peers,
    imap_wire,
    served,
    token,
    until_idling,
)
from bench.pipeline import pct
from tests.helpers import configure
from tests.peers.cyrus import make_message
from tests.peers.dovecot import DovecotServer

SPACING_S = 1.618  # bench.delivery's stride (above the governor's one message a second)
_chats = itertools.count(9_370_001)


def ms(values: list[float]) -> str:
    if not values:
        return "none"
    return (f"p50 {statistics.median(values):.0f} / p99 {pct(values, 0.99):.0f} / "
            f"max {max(values):.0f} ms")


@dataclass
class Series:
    """One series of new mails of the measured account: per mail, delivery → our message and
    → the floor's (ms), and the mails that got no message of ours within the wait."""

    label: str
    ours: list[float]
    floor: list[float]
    missing: int
    load: float

    @property
    def diff(self) -> list[float]:
        return [o - f for o, f in zip(self.ours, self.floor, strict=False)]

    def line(self) -> str:
        return (f"{self.label}: delivery → chat ours {ms(self.ours)}; floor {ms(self.floor)}; "
                f"per mail ours − floor {ms(self.diff)} ({len(self.ours)} mails, "
                f"{self.missing} missing, load {self.load:.2f})")

    def summary(self) -> dict[str, object]:
        def rounded(values: list[float], p: float) -> int | None:
            return round(pct(values, p)) if values else None
        return {"label": self.label, "mails": len(self.ours), "missing": self.missing,
                "p50_ms": rounded(self.ours, 0.5), "p99_ms": rounded(self.ours, 0.99),
                "floor_p50_ms": rounded(self.floor, 0.5),
                "floor_p99_ms": rounded(self.floor, 0.99),
                "diff_p50_ms": rounded(self.diff, 0.5), "diff_p99_ms": rounded(self.diff, 0.99),
                "load": round(self.load, 2)}


@dataclass
class Bench:
    """The served app, its admin session, and the measured account with its floor."""

    peers: Peers
    http: httpx.AsyncClient
    admin: dict[str, str]
    redis: aioredis.Redis
    bot: str
    pid: int
    floor: Floor
    floor_bot: str
    delivered: int = 0  # mails delivered to the measured INBOX since the floor selected it
    series_done: int = 0
    accounts: list[str] = field(default_factory=list)

    @property
    def dovecot(self) -> DovecotServer:
        assert isinstance(self.peers.server, DovecotServer)
        return self.peers.server


@contextlib.asynccontextmanager
async def bench(peers: Peers, log: Path, extra_env: dict[str, str] | None = None,
                **wire: object) -> AsyncIterator[Bench]:
    """`messageweave serve` configured with the measured account (`wire` overrides), idling on
    its INBOX, and the floor idling beside it."""
    bot, floor_bot = token(), token()
    redis = aioredis.from_url(peers.redis_url, decode_responses=True)
    async with served(peers, log, extra_env) as (http, pid):
        admin = await configure(http, {**imap_wire(peers, bot), **wire})
        await until_idling(http, admin, redis)
        floor = Floor(peers, f"{peers.emulator.base_url}/bot{floor_bot}")
        task = asyncio.create_task(floor.run())
        try:
            await asyncio.wait_for(floor.ready.wait(), 30)
            yield Bench(peers, http, admin, redis, bot, pid, floor, floor_bot)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await redis.aclose()


def subject_of(phase: int, n: int) -> str:
    return f"accounts phase {phase} mail {n:05d}"  # no subject is a prefix of another


async def _ours(b: Bench, phase: int, mails: int, timeout_s: float) -> list[float | None]:
    """Mail n → the store time of our first message naming it (the emulator read every 0.5 s:
    a read costs the Node emulator CPU that the peers share)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found: list[float | None] = [None] * mails
        for m in await b.peers.emulator.sent_messages(b.bot, CHAT):
            for n in range(mails):
                if found[n] is None and subject_of(phase, n) in m.text:
                    found[n] = m.stored_ms / 1000
        if all(t is not None for t in found) or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.5)


async def _floor_times(b: Bench, first: int, mails: int) -> list[float | None]:
    """Mail `first + n` of the INBOX → the store time of the floor's message for the first
    EXISTS that counts it."""
    sent = {int(m.text.split()[1]): m.stored_ms / 1000
            for m in await b.peers.emulator.sent_messages(b.floor_bot, FLOOR_CHAT)}
    counts = sorted(sent)
    times: list[float | None] = []
    for n in range(mails):
        count = next((c for c in counts if c >= b.floor.start + first + n + 1), None)
        times.append(sent[count] if count is not None else None)
    return times


async def series(b: Bench, label: str, mails: int, spacing_s: float = SPACING_S,
                 wait_s: float = 60) -> Series:
    """`mails` mails over LMTP to the measured INBOX, `spacing_s` apart on an absolute
    schedule, each timed from the LMTP call to the emulator's store time of our message naming
    it and of the floor's."""
    b.series_done += 1
    phase, first, load = b.series_done, b.delivered, os.getloadavg()[0]
    delivered: list[float] = []
    start = time.time()
    for n in range(mails):
        await asyncio.sleep(max(0.0, start + n * spacing_s - time.time()))
        raw = make_message(subject=subject_of(phase, n))
        t0 = time.time()
        await asyncio.to_thread(b.peers.server.deliver, raw, USER)
        delivered.append(t0)
        b.delivered += 1
    ours = await _ours(b, phase, mails, wait_s)
    await asyncio.sleep(1.0)  # the floor's last send stored
    floor = await _floor_times(b, first, mails)
    pairs = [(o, f, d) for o, f, d in zip(ours, floor, delivered, strict=True)
             if o is not None and f is not None]
    return Series(label, [(o - d) * 1000 for o, _, d in pairs],
                  [(f - d) * 1000 for _, f, d in pairs],
                  sum(1 for o in ours if o is None), load)


async def add_account(b: Bench, account_id: str, user: str | None = None, **wire: object
                      ) -> int:
    """Account `account_id` over the admin API with a chat of its own, by default the Dovecot
    user `user` (`account_id`; password `pw-<user>`, made by `dovecot_user`) over IMAPS; its
    chat. The
    answer says whether this instance's runtime serves it at once (`runtime_applied`: the
    registry reads the accounts before answering); anything else ends the bench."""
    chat, user = next(_chats), user or account_id
    body: dict[str, object] = {
        "id": account_id, "name": account_id, "telegram_chat_id": chat, "chat_allowlist": [chat],
        "mail_source": "imap", "imap_host": "127.0.0.1", "imap_port": b.peers.port,
        "imap_security": "tls", "imap_username": user,
        "imap_password": f"pw-{user}", "imap_ca_pem": b.dovecot.ca_file.read_text(),
        "imap_notify_mailboxes": ["INBOX"]}
    body.update(wire)
    created = await b.http.post("/api/accounts", headers=b.admin, json=body)
    if created.status_code != 201 or not created.json().get("runtime_applied"):
        raise SystemExit(f"account {account_id} not created and served: "
                         f"{created.status_code} {created.text[:300]}")
    b.accounts.append(account_id)
    return chat


def dovecot_user(b: Bench, user: str) -> None:
    b.dovecot.add_user(user, f"pw-{user}")
