"""Benchmark (not a test): the home setup of issue #22, timed where the user's clock starts.

    .venv/bin/python -m bench.delivery --mails 50 --spacing-ms 1618 --chats 20

`messageweave run` (what `scripts/run.sh` runs: embedded Redis, a generated admin key) is
started in its own data directory and configured the way a new user does it from the page: a
bot token, the JMAP account (the test Cyrus's certificate pasted as `jmap_ca_pem`, no process
trust store), a chat id; `push_mode` and `telegram_updates` left at their defaults (`auto`), no
webhook, no callback URL. Nothing can call it: Telegram's updates come by long polling and mail
changes by the session's EventSource (the test Cyrus runs the harness's patched httpd, whose
`jmap_pushpoll` is 1 s: the server itself looks for changes once a second).

1. **Delivery → phone.** `--mails` mails delivered over LMTP, `--spacing-ms` apart; each timed
   from the LMTP call to the emulator's store time of our `sendMessage` (`stored_ms`, the
   emulator's Date.now() on this host's clock). The floor, in the same run: a bare EventSource
   client on the same account (httpx, no app), which sends one bare `sendMessage` (to another
   chat) the moment it reads the `state` event; timed the same way.
2. **Chat round trip.** `--chats` times the emulator's user writes `/help`, `--spacing-ms`
   apart (the rate governor keeps Telegram's one message a second per chat, so faster typing
   would time the governor); timed to the store time of our reply. The floor: a minimal
   `getUpdates` → `sendMessage` echo loop (httpx, its own bot token), timed the same way.

Prints p50 / p99 / max for each, beside its floor.

**`--marks FILE`: where our share goes.** The two medians above each carry their own
connection's sampling of the server's wait (see below), so their difference is our path's share
only to within a few tens of ms. With `--marks` the bench appends the time of each delivery and
of each `state` event the floor reads to FILE, and gives the app `MW_TIMING=FILE`; an app tree
patched with `bench/marks.patch` appends its own marks there (its `state` event, the pass, the
JMAP answer, the enqueue, the worker's read, sendMessage sent and answered):

    git worktree add /tmp/mw-marks HEAD && git -C /tmp/mw-marks apply "$PWD/bench/marks.patch"
    PYTHONPATH=/tmp/mw-marks/src .venv/bin/python -m bench.delivery --marks /tmp/marks.log

Then it prints the p50 of the server's wait on each connection (delivery → its `state`
event), and the p50 / p99 of our path from our event to each step up to our sendMessage's
answer: our path minus the floor's (one bare send, ~2 ms) is our share without the phases'
noise.

**The spacing, and why 1,618 ms.** Cyrus looks for changes once a second for each EventSource
connection, each connection on its own timer (opened at another moment, so at another phase).
A mail's wait for the server's event is its delivery's distance to that connection's next tick:
anywhere in [0, 1 s). Mails a whole or half number of seconds apart land at one or two phases
of the timer, so a run samples one or two points of that wait, and a different one for ours and
for the floor's connection: the difference of the two medians is then the phase between the two
connections, not our path (issue #26's first runs: +206 ms at 1,500 ms). 1,618 ms is 1 s plus
the golden ratio's fraction: the k-th mail lands at phase frac(0.618·k + c) of any 1 s timer,
which spreads 50 mails evenly over the whole second (the most even spread of any fixed stride),
for our connection and for the floor's alike. Each side's p50 and p99 then estimate the same
quantile of the server's wait plus that side's own path, and their difference is our path's
share to within about 1 s / mails. `--spacing-ms` takes any other stride.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from bench.peers import started_peers
from bench.pipeline import pct
from bench.quiet import add_quiet_arguments, quiet_gaps
from tests.helpers import CYRUS_PASSWORD, CYRUS_USER, console_script, free_port
from tests.peers.cyrus import CyrusServer, make_message
from tests.peers.telegram import TelegramEmulator

from messageweave.mail.jmap.eventsource import SseParser, expand
from messageweave.settings import KEY_FILE

CHAT = 9_100_001
FLOOR_CHAT = 9_100_002


def line(name: str, values: list[float], floor: list[float]) -> str:
    def part(v: list[float]) -> str:
        return (f"p50 {statistics.median(v):.0f} / p99 {pct(v, 0.99):.0f} / "
                f"max {max(v):.0f} ms")
    return f"{name}: ours {part(values)}; floor {part(floor)} ({len(values)} samples)"


async def start_run(data: Path, marks: Path | None, redis_url: str | None = None
                    ) -> tuple[asyncio.subprocess.Process, str, str]:
    """`messageweave run` on a free port (its embedded Redis, or `redis_url`'s); (process, URL,
    admin key)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items()
           if k not in ("SSL_CERT_FILE", "REDIS_URL", "CONFIG_ENCRYPTION_KEY")}
    if redis_url is not None:
        env["REDIS_URL"] = redis_url
    if marks is not None:
        env["MW_TIMING"] = str(marks)
    proc = await asyncio.create_subprocess_exec(
        console_script("messageweave"), "run", "--data-dir", str(data), "--port", str(port),
        env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient() as http:
        for _ in range(300):
            try:
                if (await http.get(url + "/healthz", timeout=1)).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
    return proc, url, (data / KEY_FILE).read_text().strip()


async def configure(url: str, key: str, cyrus: CyrusServer, emulator: TelegramEmulator,
                    token: str) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=30) as api:
        session = (await api.post("/api/admin/session",
                                  headers={"Authorization": f"Bearer {key}"})).json()["session"]
        admin = {"Authorization": f"Bearer {session}"}
        wire = {
            "bot_token": token, "telegram_chat_id": CHAT, "chat_allowlist": [CHAT],
            "telegram_api_base_url": emulator.base_url, "timezone": "Etc/UTC",
            "jmap_session_url": cyrus.origin + "/", "jmap_username": CYRUS_USER,
            "jmap_password": CYRUS_PASSWORD, "jmap_ca_pem": cyrus.ca_file.read_text(),
            "llm_enabled": False, "llm_allow_net": False, "bot_language": "en",
            "telegram_webhook_secret": secrets.token_urlsafe(24),
            "reconcile_token": secrets.token_urlsafe(24),
            "worker_token": secrets.token_urlsafe(24),
        }
        saved = await api.put("/api/business-config", headers=admin, json=wire)
        assert saved.status_code == 200, saved.text
        assert (await api.put("/api/enabled", headers=admin, json={"enabled": True})).is_success
        for _ in range(600):
            ready = await api.get("/ready")
            body = ready.json() if ready.status_code == 200 else {}
            if body.get("push") == "ok (eventsource)" and body.get("updates") == "ok (polling)":
                return
            await asyncio.sleep(0.1)
        raise SystemExit(f"the service never got ready: {ready.text}")


def mark(marks: Path | None, label: str, at: float | None = None) -> None:
    """A line `<unix time> <label>` appended to the marks file (the patched app's format)."""
    if marks is not None:
        with marks.open("a") as f:
            f.write(f"{time.time() if at is None else at:.6f} {label}\n")


async def floor_eventsource(cyrus: CyrusServer, emulator: TelegramEmulator, token: str,
                            stop: asyncio.Event, marks: Path | None) -> None:
    """The bare client: on each `state` event, one bare sendMessage. A stream that ends is
    opened again, and a send on a connection the emulator closed meanwhile (Node closes an
    idle one after 5 s: quiet spells) is sent once more, as any client would; both counted."""
    session = await asyncio.to_thread(cyrus.session)
    url = expand(session["eventSourceUrl"], types="Email", closeafter="no", ping="30")
    auth = httpx.BasicAuth(CYRUS_USER, CYRUS_PASSWORD)
    send = f"{emulator.base_url}/bot{token}/sendMessage"
    n = 0
    async with httpx.AsyncClient(verify=str(cyrus.ca_file), auth=auth,
                                 timeout=httpx.Timeout(10, read=None)) as http:
        while not stop.is_set():
            try:
                async with http.stream("GET", url) as resp:
                    parser = SseParser()
                    async for raw in resp.aiter_lines():
                        event = parser.feed(raw.rstrip("\r"))
                        if event is not None and event.type == "state":
                            mark(marks, "floor_event")
                            await send_retried(http, send, f"floor {n}")
                            n += 1
                        if stop.is_set():
                            return
            except httpx.TransportError as exc:
                FLOOR_FAULTS.append(f"stream: {type(exc).__name__}")
            FLOOR_FAULTS.append("stream ended")


FLOOR_FAULTS: list[str] = []  # what the floor's connections met during the run


async def send_retried(http: httpx.AsyncClient, url: str, text: str,
                        chat: int = FLOOR_CHAT) -> None:
    try:
        await http.post(url, json={"chat_id": chat, "text": text})
    except httpx.TransportError as exc:
        FLOOR_FAULTS.append(f"send: {type(exc).__name__}")
        await http.post(url, json={"chat_id": chat, "text": text})


async def floor_echo(emulator: TelegramEmulator, token: str, stop: asyncio.Event) -> None:
    """The minimal echo loop: getUpdates (long poll) → sendMessage, nothing else."""
    base = f"{emulator.base_url}/bot{token}"
    offset = 0
    async with httpx.AsyncClient(timeout=40) as http:
        while not stop.is_set():
            answer = (await http.post(f"{base}/getUpdates",
                                      json={"offset": offset, "timeout": 5})).json()
            for update in answer.get("result", []):
                offset = update["update_id"] + 1
                chat = update["message"]["chat"]["id"]
                await send_retried(http, f"{base}/sendMessage", "echo", chat)


async def stored_after(emulator: TelegramEmulator, token: str, chat: int, count: int,
                       timeout_s: float = 60) -> list[float]:
    messages = await emulator.wait_for_messages(token, chat, count, timeout_s)
    return [m.stored_ms / 1000 for m in messages]


STEPS = ("event", "pass_start", "jmap_done", "enqueued", "read", "send_start", "send_done")


def print_marks(marks: Path, delivered: list[float]) -> list[float]:
    """Per mail: each connection's wait for its `state` event, and our path step by step;
    our path from our `state` event to our sendMessage answered, per mail, returned (ms)."""
    rows = [line.split(None, 1) for line in marks.read_text().splitlines()]
    at: dict[str, list[float]] = {}
    for t, label in rows:
        at.setdefault(label.split()[0], []).append(float(t))
    if "event" not in at:
        print("marks: the app wrote none (is its tree patched with bench/marks.patch?)")
        return []

    def first_after(label: str, t: float) -> float | None:
        return min((x for x in at.get(label, []) if x > t), default=None)

    waits_f: list[float] = []
    waits_o: list[float] = []
    steps: dict[str, list[float]] = {s: [] for s in STEPS[1:]}
    for d in delivered:
        floor, ours = first_after("floor_event", d), first_after("event", d)
        if floor is None or ours is None:
            continue
        waits_f.append((floor - d) * 1000)
        waits_o.append((ours - d) * 1000)
        found = {step: first_after(step, ours) for step in STEPS[1:]}
        # A pass that was running anyway may have sent the mail before our event came: then
        # the steps after the event are the next mail's, not this one's path.
        times = [t for t in found.values() if t is not None and t - ours < 0.5]
        if len(times) == len(found):
            for step, t in zip(found, times, strict=True):
                steps[step].append((t - ours) * 1000)
    print(f"marks: the server's wait p50, floor {statistics.median(waits_f):.1f} / ours "
          f"{statistics.median(waits_o):.1f} ms (the phases' share of the difference: "
          f"{statistics.median(waits_o) - statistics.median(waits_f):+.1f} ms)")
    print("marks: our path from our state event, p50 / p99 ms: " + ", ".join(
        f"{step} {statistics.median(v):.1f} / {pct(v, 0.99):.1f}"
        for step, v in steps.items() if v))
    return steps["send_done"]


@dataclass(frozen=True)
class Delivered:
    """Per mail, delivery → our message stored, and the floor's; per `/help`, the chat round
    trip, ours and the echo floor's; in ms."""

    ours: list[float]
    floor: list[float]
    chat: list[float]
    chat_floor: list[float]
    path: list[float]  # with marks: our `state` event → our sendMessage answered


async def run(mails: int, spacing_s: float, chats: int, marks: Path | None,
              quiet: tuple[float, float] | None = None, seed: int = 0,
              redis_url: str | None = None) -> Delivered:
    # Mail n at start + at[n]; /help k after waits[k] of silence.
    if quiet is None:
        at, waits = [n * spacing_s for n in range(mails)], [spacing_s] * chats
    else:
        gaps = quiet_gaps(quiet, mails + chats, seed)
        at = [sum(gaps[:n + 1]) for n in range(mails)]
        waits = gaps[mails:]
    load = os.getloadavg()[0]
    print(f"load at the start {load:.2f}")
    with started_peers("mwd", embedded_redis=False) as peers:
        cyrus, emulator = peers.cyrus, peers.emulator
        data = Path(tempfile.mkdtemp(prefix="mwd-run", dir="/tmp"))
        token = f"{secrets.randbelow(10**9)}:{secrets.token_urlsafe(20)}"
        floor_token = f"{secrets.randbelow(10**9)}:{secrets.token_urlsafe(20)}"
        proc, url, key = await start_run(data, marks, redis_url)
        try:
            await configure(url, key, cyrus, emulator, token)
            stop = asyncio.Event()
            bare = asyncio.create_task(floor_eventsource(cyrus, emulator, floor_token, stop,
                                                         marks))
            await asyncio.sleep(1.0)  # the bare client connected
            delivered: list[float] = []
            start = time.time()
            for n in range(mails):
                # On an absolute schedule, so that the stride (and the phases it spreads) does
                # not drift by each delivery's own time.
                await asyncio.sleep(max(0.0, start + at[n] - time.time()))
                t0 = time.time()
                raw = make_message(subject=f"delivery {n}")
                await asyncio.to_thread(cyrus.deliver, raw)
                delivered.append(t0)
                mark(marks, "delivered", t0)
            ours = await stored_after(emulator, token, CHAT, mails)
            floor = await stored_after(emulator, floor_token, FLOOR_CHAT, mails)
            stop.set()
            bare.cancel()
            to_phone = [(s - d) * 1000 for s, d in zip(ours, delivered, strict=True)]
            floor_ms = [(s - d) * 1000 for s, d in zip(floor, delivered, strict=True)]
            print(line("delivery → phone (EventSource)", to_phone, floor_ms))
            if FLOOR_FAULTS:
                print("the floor's connections met: " + ", ".join(FLOOR_FAULTS))
            # Cyrus looks for changes once a second for each EventSource connection, on each
            # connection's own timer: the per-mail difference shows that phase apart from ours.
            diff = sorted(o - f for o, f in zip(to_phone, floor_ms, strict=True))
            if quiet is not None:
                print("quiet spells: per mail, the silence before it / ours − floor: " + ", ".join(
                    f"{at[n] - (at[n - 1] if n else 0):.0f} s / {o - f:+.0f} ms"
                    for n, (o, f) in enumerate(zip(to_phone, floor_ms, strict=True))))
            print(f"per mail, ours − floor: p50 {statistics.median(diff):.0f} / min "
                  f"{diff[0]:.0f} / max {diff[-1]:.0f} ms; the state event of ours after the "
                  f"floor's: {sum(1 for d in diff if d > 0)} of {len(diff)}")
            path = print_marks(marks, delivered) if marks is not None else []

            echo_token = f"{secrets.randbelow(10**9)}:{secrets.token_urlsafe(20)}"
            echo = asyncio.create_task(floor_echo(emulator, echo_token, stop := asyncio.Event()))
            await asyncio.sleep(0.5)
            asked, asked_floor = [], []
            for wait in waits:
                await asyncio.sleep(wait)  # Telegram's 1 message/s per chat (governor)
                asked.append(time.time())
                await emulator.send_user_message(token, CHAT, "/help")
                await emulator.wait_for_messages(token, CHAT, mails + len(asked), 30)
                asked_floor.append(time.time())
                await emulator.send_user_message(echo_token, CHAT, "/help")
                await emulator.wait_for_messages(echo_token, CHAT, len(asked_floor), 30)
            stop.set()
            echo.cancel()
            replies = (await stored_after(emulator, token, CHAT, mails + chats))[mails:]
            echoes = await stored_after(emulator, echo_token, CHAT, chats)
            if FLOOR_FAULTS:
                print("the floors' connections met: " + ", ".join(FLOOR_FAULTS))
            chat = [(s - a) * 1000 for s, a in zip(replies, asked, strict=True)]
            chat_floor = [(s - a) * 1000 for s, a in zip(echoes, asked_floor, strict=True)]
            print(line("chat round trip (long polling)", chat, chat_floor))
            print("SUMMARY delivery: " + json.dumps({
                "mails": mails, "spacing_ms": spacing_s * 1000, "quiet": quiet,
                "load": round(load, 2),
                "p50_ms": round(statistics.median(to_phone)),
                "p99_ms": round(pct(to_phone, 0.99)),
                "floor_p99_ms": round(pct(floor_ms, 0.99))}))
            return Delivered(to_phone, floor_ms, chat, chat_floor, path)
        finally:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 30)
            shutil.rmtree(data, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mails", type=int, default=50)
    parser.add_argument("--spacing-ms", type=int, default=1618)
    parser.add_argument("--chats", type=int, default=20)
    parser.add_argument("--marks", type=Path, default=None,
                        help="append delivery and event times here (and the patched app's)")
    add_quiet_arguments(parser)
    args = parser.parse_args()
    asyncio.run(run(args.mails, args.spacing_ms / 1000, args.chats, args.marks, args.quiet,
                    args.seed))


if __name__ == "__main__":
    main()
