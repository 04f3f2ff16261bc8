"""Benchmark (not a test): mail appended to Cyrus → a JMAP StateChange push → catch-up reconcile →
the real worker → the Telegram emulator, end to end.

    .venv/bin/python -m bench.push --mails 50 --spacing-ms 100
    .venv/bin/python -m bench.push --mails 50 --spacing-ms 100 --poll-ms 5   # the old observer

Starts an embedded Redis, a real Cyrus and the Bot API emulator (the test harness's peers), runs
the real app in-process (lifespan: worker + scheduler), stores a configuration with no periodic
reconcile schedule, lifts the rate governor's limits and runs the first (baseline) reconcile.
The push's catch-up throttle (`keys.PUSH_CATCHUP_INTERVAL_S`, 1 s: issues #23, #26) is set to
`--catchup-interval-s` (default 0, as the governor's limits are lifted): with it, every mail
pushed less than that after the last pass waits for the interval's end.
The configuration is stored by a first run of the app, and the measured run starts with it
(a restarted instance: what its start-up opens is in place, issue #26); `--configure-live`
configures the measured run itself, as this bench did before.

Cyrus has no PushSubscription/set, so the push registration a real JMAP server would have
accepted is recorded directly in Redis with the project's own `store.push.record_registration`
(the same thing the push-registration path stores after PushSubscription/set create).

Then, one mail at a time, spaced `--spacing-ms` apart: IMAP APPEND to Cyrus, then POST an
RFC 8620 StateChange naming the configured account to `/push/jmap`. Reported per mail, p50 /
p99: IMAP APPEND started → the emulator stored the sendMessage, and push POST sent → the
emulator stored the sendMessage. The store time is the emulator's own (`stored_ms` of
`/control/sentMessages`, a harness field; Date.now() on the same host clock as this process).

The emulator is read once the last mail was pushed (every 100 ms until all are there), so the
observer costs the run nothing. `--poll-ms N` reads it every N ms during the run instead, as
this bench did before: on a 2-core machine that load on the emulator (Node, re-encoding every
stored message per read) slows Cyrus and the app down, and the delay it adds is printed too
(poll → first seen).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import secrets
import statistics
import time

import redis.asyncio as aioredis
from bench.peers import started_peers
from bench.pipeline import pct
from tests.helpers import CYRUS_USER, running_client, settings_for
from tests.served import configure, lift_limits, peer_wire

from messageweave.store import keys
from messageweave.store.push import Registration, record_registration


def state_change(account: str, n: int) -> dict[str, object]:
    return {"@type": "StateChange", "changed": {account: {"Email": f"bench-{n}"}}}


def summary(name: str, values: list[float]) -> str:
    return (f"{name}: p50 {statistics.median(values):.0f} ms, p99 {pct(values, 0.99):.0f} ms, "
            f"min {min(values):.0f} ms, max {max(values):.0f} ms")


async def run(mails: int, spacing_s: float, poll_s: float, restart: bool,
              catchup_interval_s: int) -> None:
    # Like the governor's limits: the push's catch-up throttle (issue #23, one pass per
    # PUSH_CATCHUP_INTERVAL_S) would time itself, not the path, for mails closer than it.
    keys.PUSH_CATCHUP_INTERVAL_S = catchup_interval_s
    with started_peers("mwp") as peers:
        url, cyrus, emulator = peers.redis_url, peers.cyrus, peers.emulator
        wire = peer_wire(cyrus, emulator, reconcile_interval_s=0)
        redis = aioredis.from_url(url, decode_responses=True)
        if restart:  # configured by a first run of the app: this one starts with it stored
            async with running_client(settings_for(url)) as client:
                await configure(client, wire)
        async with running_client(settings_for(url)) as client:
            if not restart:
                await configure(client, wire)
            await lift_limits(redis)
            auth = {"Authorization": f"Bearer {wire['reconcile_token']}"}
            baseline = await client.post("/reconcile", headers=auth)
            assert baseline.status_code == 204, baseline.text
            token = secrets.token_urlsafe(24)  # the callback URL's token (issue #23)
            await record_registration(redis, Registration("b" * 64, "P-bench"), now=time.time(),
                                      token_digest=hashlib.sha256(token.encode()).hexdigest())
            await redis.hset(keys.PUSH_LIFECYCLE, "verified", str(int(time.time())))
            print("push registration recorded directly in Redis "
                  "(store.push.record_registration): Cyrus has no PushSubscription/set")

            appended: dict[str, float] = {}
            pushed: dict[str, float] = {}
            stored: dict[str, float] = {}  # the emulator's store time
            seen: dict[str, float] = {}  # when a read of the emulator first saw it
            all_pushed, all_seen = asyncio.Event(), asyncio.Event()

            async def poll() -> None:
                if not poll_s:
                    await all_pushed.wait()
                    await asyncio.sleep(1.0)  # the last mail's delivery is not read into
                while len(stored) < mails:
                    for m in await emulator.sent_messages(wire["bot_token"]):
                        subject = m.text.split("\n")[1].removeprefix("Subject: ")
                        stored.setdefault(subject, m.stored_ms / 1000)
                        seen.setdefault(subject, time.time())
                    await asyncio.sleep(poll_s or 0.1)
                all_seen.set()

            poller = asyncio.create_task(poll())
            append_ms: list[float] = []
            post_ms: list[float] = []
            for n in range(mails):
                subject = f"push {n}"
                t0 = time.time()
                # blocking IMAP in a thread: the app's worker shares this event loop
                await asyncio.to_thread(cyrus.append, subject=subject)
                appended[subject] = t0
                append_ms.append((time.time() - t0) * 1000)
                pushed[subject] = time.time()
                r = await client.post(f"/push/jmap?t={token}",
                                      json=state_change(CYRUS_USER, n))
                post_ms.append((time.time() - pushed[subject]) * 1000)
                assert r.status_code == 204, r.text
                await asyncio.sleep(max(0.0, spacing_s - (time.time() - t0)))
            all_pushed.set()
            try:
                await asyncio.wait_for(all_seen.wait(), timeout=60)
            except TimeoutError:
                poller.cancel()
            got = [s for s in appended if s in stored]
            from_append = [(stored[s] - appended[s]) * 1000 for s in got]
            from_push = [(stored[s] - pushed[s]) * 1000 for s in got]
            print(f"{len(got)}/{mails} mails delivered, one every {spacing_s * 1000:.0f} ms "
                  f"(IMAP APPEND p50 {statistics.median(append_ms):.0f} ms, "
                  f"push POST p50 {statistics.median(post_ms):.0f} ms)")
            print(summary("append→sendMessage", from_append))
            print(summary("push POST→sendMessage", from_push))
            if poll_s:
                print(summary(f"stored→seen by the {poll_s * 1000:.0f} ms poll",
                              [(seen[s] - stored[s]) * 1000 for s in got]))
            slowest = sorted(zip(from_push, got, strict=True), reverse=True)[:3]
            print("slowest push POST→sendMessage: " + ", ".join(
                f"{subject} {ms:.0f} ms" for ms, subject in slowest))
            observer = f"poll every {poll_s * 1000:.0f} ms" if poll_s else "read after the run"
            print(f"SUMMARY push: {len(got)}/{mails} mails, spacing {spacing_s * 1000:.0f} ms, "
                  f"catch-up interval {catchup_interval_s} s, "
                  f"emulator {observer}, "
                  f"APPEND p50 {statistics.median(append_ms):.0f} ms, append→sendMessage p50 "
                  f"{statistics.median(from_append):.0f} / p99 {pct(from_append, 0.99):.0f} ms, "
                  f"push POST→sendMessage p50 {statistics.median(from_push):.0f} / p99 "
                  f"{pct(from_push, 0.99):.0f} ms")
        await redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mails", type=int, default=50)
    parser.add_argument("--spacing-ms", type=int, default=100)
    parser.add_argument("--poll-ms", type=int, default=0,
                        help="read the emulator every N ms during the run (0: after it)")
    parser.add_argument("--configure-live", action="store_true",
                        help="configure the running app (default: start it configured)")
    parser.add_argument("--catchup-interval-s", type=int, default=0,
                        help="PUSH_CATCHUP_INTERVAL_S for the run (the app's default: 1)")
    args = parser.parse_args()
    asyncio.run(run(args.mails, args.spacing_ms / 1000, args.poll_ms / 1000,
                    not args.configure_live, args.catchup_interval_s))


if __name__ == "__main__":
    main()
