"""Benchmark (not a test): one catch-up reconcile after downtime, over many new mails.

    .venv/bin/python -m bench.catchup --mails 10000
    .venv/bin/python -m bench.catchup --mails 100000 --data-dir /tmp/mw-catchup-100k

An embedded Redis and a real Cyrus (HTTPS JMAP). The first reconcile takes the baseline (as the
service does before its downtime: old mail is never notified); then `--mails` new mails are put
into the INBOX by IMAP MULTIAPPEND (RFC 3502: `--batch` messages per APPEND command, sent as
LITERAL+ literals without a round trip each) over `--connections` parallel connections; then one
reconcile runs in this process, as the first pass after the downtime, and must enqueue every one
of them (one `stalwart:jmap` entry and one `dedup:jmap` claim each). Each mail has its own
Message-ID and body, so Cyrus holds as many distinct Emails (its Email id comes from the
content). A thread samples this process's VmRSS every 2 ms during the pass; the idle figure is
taken just before it. One summary line.

Why MULTIAPPEND: one APPEND per mail costs imapd about 5 ms of CPU (the mailbox is opened,
locked and committed per command, and the connections queue on the mailbox lock: 40-150
mails/s however many there are), one MULTIAPPEND of 500 mails about 0.8 ms a mail (700-1000
mails/s over 4 connections on 2 cores: 100,000 in under 2 minutes). fsync is the smaller part
(about 2 a mail, 0.4 ms each); LMTP delivery costs lmtpd about 4 ms a mail.

`--data-dir` keeps the Cyrus mailbox (and the baseline's Email state and watermark) there: the
first run appends, later runs with the same directory and `--mails` skip the append and restore
the saved baseline cursor into a fresh Redis, so the pass sees the same downtime again.
"""

from __future__ import annotations

import argparse
import asyncio
import email.utils
import gc
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import redis.asyncio as aioredis
from tests.helpers import CYRUS_PASSWORD, CYRUS_USER
from tests.peers.cyrus import HOST, CyrusServer, new_base_dir, remove_base_dir

from messageweave.mail.jmap import JmapClient
from messageweave.mail.reconcile import WALK_PROPERTIES, Budget, reconcile
from messageweave.store import keys
from messageweave.store.redis import EmbeddedRedis

BASELINE_FILE = "baseline.json"


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        return int(f.read().split("VmRSS:")[1].split()[0])


class RssSampler(threading.Thread):
    """The highest VmRSS of this process while it runs."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = rss_kib()
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(0.002):
            self.peak = max(self.peak, rss_kib())

    def stop(self) -> int:
        self._done.set()
        self.join()
        self.peak = max(self.peak, rss_kib())
        return self.peak


def catchup_message(n: int) -> bytes:
    """Mail number `n`: its own Message-ID, subject and body (so its own Cyrus Email)."""
    return (f"From: Bob Example <bob@example.org>\r\nTo: alice@localhost\r\n"
            f"Subject: catch-up {n}\r\nDate: {email.utils.formatdate()}\r\n"
            f"Message-ID: <catchup-{n}-{time.time_ns()}@example.org>\r\n"
            "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
            f"mail number {n}\r\n").encode()


def _read_tagged(conn: socket.socket, tag: bytes) -> bytes:
    """Read until the tagged reply of `tag`; raise unless it is OK."""
    seen = b""
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            raise RuntimeError(f"IMAP connection closed before {tag!r}: {seen[-300:]!r}")
        seen += chunk
        for line in seen.split(b"\r\n"):
            if line.startswith(tag + b" "):
                if not line.startswith(tag + b" OK"):
                    raise RuntimeError(f"IMAP {tag!r} failed: {line!r}")
                return seen
        seen = seen[-1000:]


def append_many(cyrus: CyrusServer, mails: int, connections: int, batch: int) -> float:
    """IMAP MULTIAPPEND `mails` small messages to alice's INBOX, `batch` per command,
    `connections` at a time; seconds."""
    started = time.monotonic()
    shares = [range(n, mails, connections) for n in range(connections)]

    def one_connection(numbers: range) -> None:
        with socket.create_connection((HOST, cyrus.ports.imap), timeout=300) as conn:
            greeting = conn.recv(4096)
            if b"LITERAL+" not in greeting:  # Cyrus lists its capabilities in the greeting
                raise RuntimeError(f"no LITERAL+ in the IMAP greeting: {greeting!r}")
            conn.sendall(f"l LOGIN {CYRUS_USER} {CYRUS_PASSWORD}\r\n".encode())
            _read_tagged(conn, b"l")
            for k, first in enumerate(range(0, len(numbers), batch)):
                tag = f"a{k}".encode()
                command = [tag + b" APPEND INBOX"]
                for n in numbers[first:first + batch]:
                    raw = catchup_message(n)
                    command.append(b" {%d+}\r\n%s" % (len(raw), raw))
                conn.sendall(b"".join(command) + b"\r\n")
                _read_tagged(conn, tag)
            conn.sendall(b"z LOGOUT\r\n")

    with ThreadPoolExecutor(connections) as pool:
        list(pool.map(one_connection, shares))
    return time.monotonic() - started


async def count_claims(redis: aioredis.Redis, account: str) -> int:
    found = 0
    async for _key in redis.scan_iter(match=keys.dedup_jmap(account, "*"), count=1000):
        found += 1
    return found


async def walk_alone(client: JmapClient, state: str, window: int) -> tuple[float, int]:
    """The floor: the pass's own requests (`changes_page` from the baseline's Email state,
    `window` changes a page, the Mailbox/changes beside each) one after the other, with
    nothing done with a page; (seconds, mails seen). What Cyrus and our JMAP client cost
    alone, so `pass - floor` is what enqueuing adds beyond what the pass overlaps."""
    seen = 0
    mailboxes = (await client.changes_page(state, 1, properties=WALK_PROPERTIES,
                                           mailboxes_since=None)).mailboxes
    mailbox_state = mailboxes.state if mailboxes is not None else None
    started = time.perf_counter()  # the first look at the mailboxes is the pass's too: untimed
    while True:
        page = await client.changes_page(state, window, properties=WALK_PROPERTIES,
                                         mailboxes_since=mailbox_state)
        seen += len(page.created)
        if not page.changes.has_more:
            return time.perf_counter() - started, seen
        state = page.changes.new_state


async def run(mails: int, connections: int, batch: int, data_dir: Path | None) -> None:
    scratch = Path(new_base_dir("mw-catchup-"))
    base = data_dir / "cyrus" if data_dir else scratch / "cyrus"
    saved = data_dir / BASELINE_FILE if data_dir else None
    base.mkdir(parents=True, exist_ok=True)
    base.chmod(0o755)
    redis_server = EmbeddedRedis(scratch / "redis")
    url = redis_server.start()
    cyrus = CyrusServer(base, users={CYRUS_USER: CYRUS_PASSWORD})
    cyrus.start()
    redis = aioredis.from_url(url, decode_responses=True)
    try:
        async with JmapClient(cyrus.session_url, CYRUS_USER, CYRUS_PASSWORD, timeout=60,
                              ca_file=cyrus.ca_file) as client:
            reused = saved is not None and saved.exists() and \
                json.loads(saved.read_text())["mails"] == mails
            if reused:
                assert saved is not None
                stored = json.loads(saved.read_text())
                await redis.mset({keys.RECONCILE_CURSOR: stored["cursor"],
                                  keys.RECONCILE_WATERMARK: stored["watermark"]})
                print(f"reusing the {mails} mails in {base} and the saved baseline")
            else:
                first = await reconcile(redis, client, ("inbox",))
                assert first.phase == "first_run", first
                took = await asyncio.to_thread(append_many, cyrus, mails, connections, batch)
                print(f"appended {mails} mails over {connections} IMAP connections, {batch} per "
                      f"MULTIAPPEND, in {took:.1f} s ({mails / took:.0f}/s)")
                if saved is not None:
                    cursor, watermark = await redis.mget(keys.RECONCILE_CURSOR,
                                                         keys.RECONCILE_WATERMARK)
                    saved.write_text(json.dumps({"mails": mails, "cursor": cursor,
                                                 "watermark": watermark}))
            await client.get_session()
            baseline_state = str(await redis.get(keys.RECONCILE_CURSOR))  # a bare Email state
            gc.collect()
            idle = rss_kib()
            sampler = RssSampler()
            sampler.start()
            started = time.perf_counter()
            result = await reconcile(redis, client, ("inbox",))
            seconds = time.perf_counter() - started
            peak = sampler.stop()
            floor_s, floor_seen = await walk_alone(client, baseline_state,
                                                   Budget().window_cap)
        entries = await redis.xlen(keys.STREAM_JMAP)
        claims = await count_claims(redis, client.account_id)
        ok = result.complete and result.enqueued == entries == claims == mails
        print(f"pass: {result.pages} pages, complete={result.complete}, "
              f"enqueued {result.enqueued}, stream entries {entries}, dedup claims {claims}"
              + ("" if ok else "  << NOT ALL ENQUEUED ONCE"))
        print(f"catch-up: {mails} mails in {seconds:.2f} s = {mails / seconds:.0f} mails/s; "
              f"RSS idle {idle / 1024:.1f} MB, peak {peak / 1024:.1f} MB, "
              f"delta {(peak - idle) / 1024:.1f} MB")
        print(f"floor, the same JMAP requests one after the other with nothing done: "
              f"{floor_seen} mails in {floor_s:.2f} s = {floor_seen / floor_s:.0f} mails/s "
              f"(the pass / floor: {seconds / floor_s:.2f})")
    finally:
        await redis.aclose()
        cyrus.stop()
        redis_server.stop()
        remove_base_dir(scratch)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mails", type=int, default=10_000)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--batch", type=int, default=500, help="mails per MULTIAPPEND")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="keep the Cyrus mailbox here and reuse it on later runs")
    args = parser.parse_args()
    asyncio.run(run(args.mails, args.connections, args.batch, args.data_dir))


if __name__ == "__main__":
    main()
