"""Benchmark (not a test): issue #33's figure, a mail delivered to an IMAP mailbox → the
notification in the chat, beside its floor measured in the same run.

    .venv/bin/python -m bench.imap_delivery --mails 50
    .venv/bin/python -m bench.imap_delivery --mails 50 --server cyrus

Starts a real Dovecot (`tests.peers.dovecot`, Debian 12's 2.3: maildir, inotify, its user
`alice`; `--server cyrus`: the harness's Cyrus imapd over STARTTLS, its `idled` running),
an embedded Redis and the Bot API emulator in this process, and `messageweave serve`
(the console script, its own process) on that Redis, configured over its admin API with an IMAP
wire: Dovecot over implicit TLS (its CA pasted as `imap_ca_pem`), the notify mailbox INBOX,
`reconcile_interval_s` and `audit_interval_s` 0 (no cron: only the IDLE holder brings mail),
the governor's limits in force (Telegram's one message a second per chat). Once `/api/push/
status` says `ok (idle)` and the first catch-up recorded the INBOX cursor:

1. **Delivery → chat.** `--mails` mails over LMTP (as an MTA delivers), `--spacing-ms` apart
   on an absolute schedule (the stride does not drift by each delivery's own time), each timed
   from the LMTP call to the emulator's store time of our `sendMessage` (`stored_ms`, its
   Date.now() on this host's clock). The floor, in the same run: a bare `ImapClient` logged in
   as the same user, `SELECT`ed read-only on INBOX and idling (`ImapClient.idle`, as the holder
   does), which sends one bare `sendMessage` (another bot token) each time IDLE ends on EXISTS;
   mail k is the first floor message whose EXISTS count reaches it, timed the same way.
2. **Each mail exactly once.** After the last notification, one `POST /reconcile` (a full
   catch-up pass, as an external cron would run it) and `--settle-s` more: every subject must
   be in exactly one of our messages.
3. **Where the time goes** (no patched app): the floor's EXISTS is read in this process (the
   server's wait: both connections idle on the same mailbox, so ours hears it within the same
   notification); a passive `XREAD BLOCK` on the delivery stream gives each mail's enqueue time
   (the entry id's milliseconds, Redis's clock on this host); the emulator's store time closes
   it. So per mail: delivery → EXISTS (Dovecot), EXISTS → enqueued (our holder's DONE, the
   catch-up flag and wake, the pass), enqueued → stored (the worker: ledger, render,
   governor, sendMessage). After the run, `fresh_passes` times the pass's IMAP side alone
   20 times (a pass opens its own connection: `mail.imap.watch`).

Dovecot's share is fixed: on an inotify event its `mailbox-watch.c` waits `NOTIFY_DELAY_MSECS`
(500 ms, compiled in) before it looks at the mailbox, so every EXISTS comes ~0.5 s after the
delivery; `imap_idle_notify_interval` only spaces its "OK Still here" keep-alives, and
`mailbox_idle_check_interval` is the stat() fallback when no inotify event comes.

The emulator is read once the last mail was delivered (a read of the Node emulator costs CPU
the peers share on a 2-core machine, see bench/push.py). Prints p50 / p99 / max for each
figure beside its floor and a `SUMMARY imap_delivery:` JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import shutil
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import httpx
import redis.asyncio as aioredis
from bench.delivery import send_retried
from bench.pipeline import pct
from bench.quiet import add_quiet_arguments, quiet_gaps
from tests.helpers import ADMIN_KEY, configure, console_script, free_port, sample_wire
from tests.peers.cyrus import CyrusServer, make_message, new_base_dir, remove_base_dir
from tests.peers.dovecot import DovecotServer
from tests.peers.dovecot import running as running_dovecot
from tests.peers.telegram import TelegramEmulator

from messageweave.mail.imap import ImapClient, Security
from messageweave.mail.imap.catchup import read_cursors
from messageweave.mail.imap.ids import parse_mail_id
from messageweave.store import keys
from messageweave.store.redis import EmbeddedRedis

USER, PASSWORD = "alice", "secret"
CHAT = 9_200_001
FLOOR_CHAT = 9_200_002


def subject_of(n: int) -> str:
    return f"imap delivery #{n:05d}"  # fixed width: no subject is a prefix of another


def token() -> str:
    return f"{secrets.randbelow(10**9)}:{secrets.token_urlsafe(20)}"


def part(values: list[float]) -> str:
    return (f"p50 {statistics.median(values):.0f} / p99 {pct(values, 0.99):.0f} / "
            f"max {max(values):.0f} ms")


@dataclass
class Peers:
    server: DovecotServer | CyrusServer
    port: int  # Dovecot's IMAPS (implicit TLS), Cyrus's IMAP (STARTTLS)
    security: Security
    emulator: TelegramEmulator
    redis_url: str

    def client(self) -> ImapClient:
        return ImapClient("127.0.0.1", self.port, username=USER, password=PASSWORD,
                          security=self.security, ssl_context=self.server.ssl_context())


ImapServer = contextlib.AbstractContextManager[tuple[DovecotServer | CyrusServer, int, Security]]


@contextlib.contextmanager
def imap_server(name: str) -> Iterator[tuple[DovecotServer | CyrusServer, int, Security]]:
    if name == "dovecot":
        with running_dovecot("mwi-dovecot-", users={USER: PASSWORD}) as dovecot:
            yield dovecot, dovecot.ports.imaps, "tls"
        return
    base = new_base_dir("mwi-cyrus-")
    cyrus = CyrusServer(base, users={USER: PASSWORD}, eventsource=False)
    try:
        cyrus.start()
        yield cyrus, cyrus.ports.imap, "starttls"
    finally:
        cyrus.stop()
        remove_base_dir(base)


@contextlib.contextmanager
def started_peers(name: str, server: ImapServer | None = None) -> Iterator[Peers]:
    """The IMAP server (`server`, else `imap_server(name)`), the embedded Redis and the
    emulator; stopped and removed after."""
    data = Path(tempfile.mkdtemp(prefix="mwi", dir="/tmp"))
    redis_server = EmbeddedRedis(data / "redis")
    url = redis_server.start()
    emulator = TelegramEmulator.start(data / "logs")
    try:
        with server or imap_server(name) as (imap, port, security):
            yield Peers(imap, port, security, emulator, url)
    finally:
        emulator.stop()
        redis_server.stop()
        shutil.rmtree(data, ignore_errors=True)


def imap_wire(peers: Peers, bot_token: str) -> dict[str, object]:
    return sample_wire(
        mail_source="imap", imap_host="127.0.0.1", imap_port=peers.port,
        imap_security=peers.security, imap_username=USER, imap_password=PASSWORD,
        imap_ca_pem=peers.server.ca_file.read_text(), imap_notify_mailboxes=["INBOX"],
        telegram_api_base_url=peers.emulator.base_url, bot_token=bot_token,
        telegram_chat_id=CHAT, chat_allowlist=[CHAT], timezone="Etc/UTC",
        reconcile_interval_s=0, audit_interval_s=0)


@contextlib.asynccontextmanager
async def served(peers: Peers, log: Path, extra_env: dict[str, str] | None = None
                 ) -> AsyncIterator[tuple[httpx.AsyncClient, int]]:
    """`messageweave serve` on the embedded Redis, until `/healthz` answers; (client, pid).
    `extra_env` comes last (it may name another REDIS_URL)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG_ENABLED", "DEBUG_TOKEN")}
    env.update(REDIS_URL=peers.redis_url, CONFIG_ENCRYPTION_KEY=ADMIN_KEY, PORT=str(port))
    env.update(extra_env or {})
    with log.open("ab") as out:
        proc = await asyncio.create_subprocess_exec(
            console_script("messageweave"), "serve", "--host", "127.0.0.1", env=env,
            stdout=out, stderr=out)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            deadline = time.monotonic() + 30
            while True:
                if proc.returncode is not None or time.monotonic() > deadline:
                    raise SystemExit(f"messageweave serve did not start (log: {log})")
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get("/healthz", timeout=1)).status_code == 200:
                        break
                await asyncio.sleep(0.1)
            yield http, proc.pid
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)


async def until_idling(http: httpx.AsyncClient, admin: dict[str, str],
                       redis: aioredis.Redis) -> None:
    """Until the app idles on INBOX and its first catch-up recorded the cursor (baseline)."""
    for _ in range(600):
        r = await http.get("/api/push/status", headers=admin)
        if (r.status_code == 200 and r.json().get("in_force") == "ok (idle)"
                and "INBOX" in await read_cursors(redis)):
            return
        await asyncio.sleep(0.1)
    raise SystemExit(f"the app never idled: {r.text}")


@dataclass
class Floor:
    """The bare IDLE client: the EXISTS counts it heard, when, and its sends."""

    peers: Peers
    base: str  # the emulator's URL of the floor's bot
    exists: list[tuple[int, float]] = field(default_factory=list)
    uidnext: int = 0
    start: int = 0  # EXISTS when it selected INBOX
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        async with self.peers.client() as client, httpx.AsyncClient(timeout=10) as http:
            state = await client.select("INBOX", readonly=True)
            self.start, self.uidnext = state.exists, state.uidnext or 1
            self.ready.set()
            while True:
                news = await client.idle(30)
                counts = [d.number for d in news if d.kind == "EXISTS" and d.number is not None]
                if counts:
                    self.exists.append((max(counts), time.time()))
                    # once more on a connection the emulator closed meanwhile (Node closes an
                    # idle one after 5 s: a quiet spell, the pauses of bench.accounts)
                    await send_retried(http, f"{self.base}/sendMessage",
                                       f"EXISTS {max(counts)}", FLOOR_CHAT)

    def heard(self, n: int) -> float | None:
        """When the floor first heard the EXISTS that counts mail n (0-based)."""
        return next((t for count, t in self.exists if count >= self.start + n + 1), None)


async def fresh_passes(peers: Peers, uid: int, count: int) -> list[float]:
    """The IMAP side of one catch-up pass alone, `count` times (ms): a new client built from the
    pasted CA as the pass builds it, connect and log in, SELECT, `UID SEARCH UID n:*`, the
    INTERNALDATE fetch of what it found, LOGOUT; no Redis, no enqueue."""
    ca_pem = peers.server.ca_file.read_text()
    took: list[float] = []
    for _ in range(count):
        t0 = time.perf_counter()
        async with ImapClient("127.0.0.1", peers.port, username=USER, password=PASSWORD,
                              security=peers.security, ca_pem=ca_pem) as client:
            await client.select("INBOX", readonly=True)
            found = await client.uid_search("UID", f"{uid}:*")
            await client.uid_fetch(found, ["UID", "INTERNALDATE"])
        took.append((time.perf_counter() - t0) * 1000)
    return took


async def observe_stream(redis: aioredis.Redis, enqueued: dict[int, float]) -> None:
    """A passive reader of the delivery stream (no group, no ack): uid → the entry id's time."""
    last = "$"
    while True:
        read = cast("list[tuple[str, list[tuple[str, dict[str, str]]]]]",
                    await redis.xread({keys.STREAM_JMAP: last}, block=1000) or [])
        for _, entries in read:
            for entry_id, fields in entries:
                last = entry_id
                ids = fields.get("email_ids", "").split() or [fields.get("email_id", "")]
                for text in ids:
                    found = parse_mail_id(text)
                    if found is not None:
                        enqueued.setdefault(found.uid, int(entry_id.split("-")[0]) / 1000)


async def notifications(emulator: TelegramEmulator, bot: str, mails: int,
                        timeout_s: float) -> dict[int, list[float]]:
    """Mail n → the store times of our messages naming its subject (read every 0.5 s)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found: dict[int, list[float]] = {n: [] for n in range(mails)}
        for m in await emulator.sent_messages(bot, CHAT):
            for n in range(mails):
                if subject_of(n) in m.text:
                    found[n].append(m.stored_ms / 1000)
        if all(found.values()) or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.5)


def share(name: str, values: list[float]) -> str:
    return f"{name} {part(values)}".lstrip() if values else f"{name}: none"


@dataclass
class Measured:
    """What one run saw: per mail n, its delivery time and our messages naming it."""

    server: str
    spacing_s: float
    lift: bool
    load: float
    delivered: list[float]
    lmtp_ms: list[float]
    ours: dict[int, list[float]]  # when the last mail's notification was in
    after: dict[int, list[float]]  # after the forced pass and the settling time
    forced: int  # POST /reconcile's status
    floor: Floor
    floor_sent: dict[int, float]  # EXISTS count → the floor's message's store time
    enqueued: dict[int, float]  # uid → the stream entry's time
    log: Path
    passes_ms: list[float]  # `fresh_passes`, after the run
    gaps: list[float] = field(default_factory=list)  # the silence before each mail (--quiet)


async def measure(server: str, mails: int, spacing_s: float, settle_s: float,
                  lift: bool, quiet: tuple[float, float] | None = None, seed: int = 0
                  ) -> Measured:
    gaps = [spacing_s] * mails if quiet is None else quiet_gaps(quiet, mails, seed)
    at = [sum(gaps[:n]) + (gaps[0] if quiet else 0) for n in range(mails)]
    load = os.getloadavg()[0]
    fd, name = tempfile.mkstemp(prefix="mwi-serve-", suffix=".log")  # kept for a look after
    os.close(fd)
    log = Path(name)
    with started_peers(server) as peers:
        bot, floor_bot = token(), token()
        redis = aioredis.from_url(peers.redis_url, decode_responses=True)
        async with served(peers, log) as (http, _pid):
            wire = imap_wire(peers, bot)
            admin = await configure(http, wire)
            if lift:
                await redis.hset(keys.GOVERNOR_LIMITS,
                                 mapping={"bot_per_s": 0, "chat_per_s": 0, "group_per_min": 0})
            await until_idling(http, admin, redis)
            floor = Floor(peers, f"{peers.emulator.base_url}/bot{floor_bot}")
            enqueued: dict[int, float] = {}
            tasks = [asyncio.create_task(floor.run()),
                     asyncio.create_task(observe_stream(redis, enqueued))]
            await asyncio.wait_for(floor.ready.wait(), 30)
            await asyncio.sleep(1.0)  # the floor's IDLE and the observer's XREAD are in place
            delivered: list[float] = []
            lmtp_ms: list[float] = []
            start = time.time()
            for n in range(mails):
                await asyncio.sleep(max(0.0, start + at[n] - time.time()))
                raw = make_message(subject=subject_of(n))
                t0 = time.time()
                await asyncio.to_thread(peers.server.deliver, raw, USER)
                delivered.append(t0)
                lmtp_ms.append((time.time() - t0) * 1000)
            ours = await notifications(peers.emulator, bot, mails, 60)
            auth = {"Authorization": f"Bearer {wire['reconcile_token']}"}
            forced = await http.post("/reconcile", headers=auth)
            await asyncio.sleep(settle_s)
            after = await notifications(peers.emulator, bot, mails, 0)
            floor_msgs = await peers.emulator.sent_messages(floor_bot, FLOOR_CHAT)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            passes_ms = await fresh_passes(peers, floor.uidnext + mails - 1, 20)
        await redis.aclose()
    return Measured(server, spacing_s, lift, load, delivered, lmtp_ms, ours, after,
                    forced.status_code, floor,
                    {int(m.text.split()[1]): m.stored_ms / 1000 for m in floor_msgs},
                    enqueued, log, passes_ms, gaps if quiet else [])


def report(m: Measured, settle_s: float) -> None:
    mails = len(m.delivered)
    missing = [n for n in range(mails) if not m.after[n]]
    twice = [n for n in range(mails) if len(m.after[n]) > 1]
    to_chat, floor_ms, wait_ms, pass_ms, worker_ms = [], [], [], [], []
    counts = sorted(m.floor_sent)
    for n, d in enumerate(m.delivered):
        count = next((c for c in counts if c >= m.floor.start + n + 1), None)
        if count is not None:
            floor_ms.append((m.floor_sent[count] - d) * 1000)
        heard, queued = m.floor.heard(n), m.enqueued.get(m.floor.uidnext + n)
        if heard is not None:
            wait_ms.append((heard - d) * 1000)
        if heard is not None and queued is not None:
            pass_ms.append((queued - heard) * 1000)
        if not m.ours[n]:
            continue
        to_chat.append((m.ours[n][0] - d) * 1000)
        if queued is not None:
            worker_ms.append((m.ours[n][0] - queued) * 1000)
    apart = ("each after a quiet spell" if m.gaps
             else f"{m.spacing_s * 1000:.0f} ms apart")
    print(f"{m.server}: {mails} mails over LMTP {apart} (LMTP call "
          f"p50 {statistics.median(m.lmtp_ms):.0f} ms), governor "
          f"{'lifted' if m.lift else 'in force'}, load at the start {m.load:.2f}")
    if m.gaps and len(to_chat) == len(floor_ms) == mails:
        print("quiet spells: per mail, the silence before it / ours − floor: " + ", ".join(
            f"{g:.0f} s / {(o - f):+.0f} ms"
            for g, o, f in zip(m.gaps, to_chat, floor_ms, strict=True)))
    print(f"delivery → chat (IDLE): ours {share('', to_chat)}; floor {share('', floor_ms)} "
          f"({len(to_chat)} / {len(floor_ms)} samples)")
    print("where ours goes: " + "; ".join([
        share("delivery → EXISTS (the server, heard by the floor)", wait_ms),
        share("EXISTS → enqueued (holder, catch-up wake, pass)", pass_ms),
        share("enqueued → stored (worker)", worker_ms)]))
    print(share("the pass's IMAP alone (new client, login, SELECT, UID SEARCH, FETCH, LOGOUT; "
                "20 after the run)", m.passes_ms))
    print(f"exactly once (after one more POST /reconcile: {m.forced}, {settle_s:.0f} s): "
          f"{mails - len(missing) - len(twice)} of {mails}; missing {len(missing)}, more than "
          f"once {len(twice)}; the app's log: {m.log if missing or twice else 'removed'}")
    if not missing and not twice:
        m.log.unlink()
    print("SUMMARY imap_delivery: " + json.dumps({
        "server": m.server, "mails": mails, "spacing_ms": round(m.spacing_s * 1000),
        "p50_ms": round(statistics.median(to_chat)) if to_chat else None,
        "p99_ms": round(pct(to_chat, 0.99)) if to_chat else None,
        "max_ms": round(max(to_chat)) if to_chat else None,
        "floor_p50_ms": round(statistics.median(floor_ms)) if floor_ms else None,
        "floor_p99_ms": round(pct(floor_ms, 0.99)) if floor_ms else None,
        "exactly_once": not missing and not twice, "load": round(m.load, 2),
        "quiet": bool(m.gaps)}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", choices=("dovecot", "cyrus"), default="dovecot")
    parser.add_argument("--mails", type=int, default=50)
    parser.add_argument("--spacing-ms", type=int, default=1618,
                        help="between deliveries (1 s + the golden ratio's fraction, as "
                             "bench.delivery: above the governor's one message a second)")
    parser.add_argument("--settle-s", type=float, default=3.0,
                        help="after the forced pass, before counting notifications again")
    parser.add_argument("--lift-limits", action="store_true",
                        help="lift the governor's limits (for spacings under 1 s)")
    add_quiet_arguments(parser)
    args = parser.parse_args()
    measured = asyncio.run(measure(args.server, args.mails, args.spacing_ms / 1000,
                                   args.settle_s, args.lift_limits, args.quiet, args.seed))
    report(measured, args.settle_s)


if __name__ == "__main__":
    main()
