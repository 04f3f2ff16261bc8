"""Benchmark (not a test): the resident memory of an idle `messageweave serve`.

    .venv/bin/python -m bench.rss --runs 3
    .venv/bin/python -m bench.rss --runs 3 --trust certifi --with-run

Starts the real peers (embedded Redis, Cyrus, the Bot API emulator) in this process. Each run
starts a fresh `messageweave serve` on that Redis (the console script, which replaces itself
with `messageweave.cli.serving`: same pid), configures it for Cyrus and the emulator over its
own admin API and switches it on. Then, with no traffic, it waits `--settle-s` and samples the
process's VmRSS (`/proc/<pid>/status`) every 100 ms for `--sample-s`. Only that process is
measured: the peers (and the embedded Redis `messageweave run` would start) are others.

Measured in the same run, for comparison (one line each, after the runs):

- `bare`: `bench.bare`'s 204 endpoint under the same HTTP server, idle: the floor that uvicorn,
  uvloop, httptools and redis-py make without the app;
- `run` (with `--with-run`): `messageweave run`, configured the same way; REDIS_URL and the key
  come from the environment, so it starts no Redis. It serves in the process that parsed its
  options, so it keeps Typer (see `messageweave.cli.serving`);
- `baseline` (with `--baseline-src DIR`): `messageweave serve` importing the package from DIR
  (put first on PYTHONPATH), e.g. an older tree unpacked with
  `git archive COMMIT src | tar -x -C /tmp/mw-base` and `--baseline-src /tmp/mw-base/src`.

With `--load`, one more fresh `serve` is measured three times (issue #26): idle after the start
(as above), after a load, and after `--idle-after-s` (default 600) idle following the load. The
load is what the other benches do to it: `--load-mails` mails appended to Cyrus and notified by
one `POST /reconcile` (the governor's limits lifted), `--load-help` `/help` messages answered
through the webhook, and `--load-s` seconds of `bench.ingest`'s raw flood of plain text the
bot does not answer (32 connections); "after the load" is sampled once every notification and
reply is stored by the emulator and `stalwart:telegram` is empty, after `--settle-s`.
`--updates auto` configures the idle serves with `telegram_updates` = `auto`, so the poller
holds its long poll to the emulator (default `webhook`, as the tests' wire).
`--env NAME=VALUE` (repeatable) sets a variable for every serve (e.g. `MALLOC_ARENA_MAX=2`);
`--trim` also samples after glibc's `malloc_trim(0)` is called in the idle-after-load process
(through gdb, no change to the app), to tell freed-but-held heap from live memory.

`--trust env` (default) trusts Cyrus's CA through SSL_CERT_FILE, as the tests do: the JMAP
client then loads one certificate (and SSL_CERT_DIR, when set, is only read on demand).
`--trust certifi` unsets both and gives that CA as `jmap_ca_pem`, so the client loads certifi's
bundle besides it, as a deployment whose JMAP server has a publicly trusted certificate does
(the container image sets neither variable).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis
from bench.flood import TEXT as FLOOD_TEXT
from bench.flood import _worked_off as worked_off
from bench.ingest import CHAT as INGEST_CHAT
from bench.ingest import _load as ingest_load
from bench.peers import Peers, started_peers
from tests.helpers import ADMIN_KEY, console_script, free_port
from tests.served import configure, lift_limits, peer_wire

from messageweave.api.delivery import SECRET_HEADER


def rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0])


@contextlib.asynccontextmanager
async def _started(argv: list[str], env: dict[str, str], port: int,
                   health: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """`argv` as a child, until `GET health` on `port` answers (any status); stopped after."""
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            deadline = time.monotonic() + 30
            while True:
                assert proc.returncode is None, f"{argv} exited early"
                with contextlib.suppress(httpx.HTTPError):
                    await http.get(health, timeout=1)
                    break
                assert time.monotonic() < deadline, f"{argv} did not start"
                await asyncio.sleep(0.1)
        yield proc
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 20)


async def _idle_rss(pid: int, settle_s: float, sample_s: float) -> tuple[float, float]:
    """The last and the highest VmRSS (MB) sampled every 100 ms after `settle_s`."""
    await asyncio.sleep(settle_s)
    samples: list[int] = []
    end = time.monotonic() + sample_s
    while time.monotonic() < end:
        samples.append(rss_kib(pid))
        await asyncio.sleep(0.1)
    return samples[-1] / 1024, max(samples) / 1024


EXTRA_ENV: dict[str, str] = {}  # --env
UPDATES = ["webhook"]  # --updates


def _env(peers: Peers, port: int, trust: str, src: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG_ENABLED", "DEBUG_TOKEN")}
    env.update(EXTRA_ENV)
    env.update(REDIS_URL=peers.redis_url, CONFIG_ENCRYPTION_KEY=ADMIN_KEY, PORT=str(port))
    if trust == "certifi":
        env.pop("SSL_CERT_FILE", None)
        env.pop("SSL_CERT_DIR", None)  # a hashed directory is read lazily, certifi's file is not
    if src:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    return env


async def _service(peers: Peers, command: str, trust: str, settle_s: float, sample_s: float,
                   src: str | None = None) -> tuple[float, float]:
    """One fresh `messageweave serve` (or `run`), configured and switched on, then idle."""
    port = free_port()
    argv = [console_script("messageweave"), command, "--host", "127.0.0.1"]
    with tempfile.TemporaryDirectory(prefix="mwr-run") as data_dir:
        if command == "run":
            argv += ["--port", str(port), "--data-dir", data_dir]
        async with _started(argv, _env(peers, port, trust, src), port, "/healthz") as proc:
            extra: dict[str, object] = {"telegram_updates": UPDATES[0]}
            if trust == "certifi":
                extra["jmap_ca_pem"] = peers.cyrus.ca_file.read_text()
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                await configure(http, peer_wire(peers.cyrus, peers.emulator, **extra))
            return await _idle_rss(proc.pid, settle_s, sample_s)


async def _apply_load(peers: Peers, port: int, wire: dict[str, Any],
                      args: argparse.Namespace) -> None:
    """Mails notified, /help answered, then the webhook flood; returns once all is done."""
    redis = aioredis.from_url(peers.redis_url)
    await lift_limits(redis)
    token, chat = str(wire["bot_token"]), int(wire["telegram_chat_id"])
    auth = {"Authorization": f"Bearer {wire['reconcile_token']}"}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
        assert (await http.post("/reconcile", headers=auth)).status_code == 204  # baseline
        for n in range(args.load_mails):
            await asyncio.to_thread(peers.cyrus.append, subject=f"rss load {n}")
        assert (await http.post("/reconcile", headers=auth)).status_code == 204
        secret = {SECRET_HEADER: str(wire["telegram_webhook_secret"])}
        for n in range(args.load_help):
            update = {"update_id": 10**8 + n, "message": {
                "message_id": n, "date": 0, "chat": {"id": chat, "type": "private"},
                "text": "/help"}}
            assert (await http.post("/webhook/tg", json=update, headers=secret)).status_code == 204
    await peers.emulator.wait_for_messages(token, chat, args.load_mails + args.load_help, 300)
    await ingest_load(port, itertools.count(10**9), args.load_s, 32, "raw", FLOOD_TEXT)
    await worked_off(redis)
    await redis.aclose()


def _trimmed_rss(pid: int) -> float:
    """VmRSS (MB) after `malloc_trim(0)` in the process (gdb attaches for the call)."""
    subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "call (int) malloc_trim(0)"],
                   capture_output=True, check=False, timeout=60)
    return rss_kib(pid) / 1024


async def _after_load(peers: Peers, args: argparse.Namespace) -> list[tuple[str, float]]:
    """One fresh `serve`: idle, after the load, after --idle-after-s idle (and trimmed)."""
    port = free_port()
    argv = [console_script("messageweave"), "serve", "--host", "127.0.0.1"]
    wire = peer_wire(peers.cyrus, peers.emulator, telegram_chat_id=INGEST_CHAT)
    out: list[tuple[str, float]] = []
    async with _started(argv, _env(peers, port, args.trust), port, "/healthz") as proc:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            await configure(http, wire)
        out.append(("idle after the start", (await _idle_rss(proc.pid, args.settle_s,
                                                             args.sample_s))[0]))
        started = time.monotonic()
        await _apply_load(peers, port, wire, args)
        out.append((f"after the load ({time.monotonic() - started:.0f} s)",
                    (await _idle_rss(proc.pid, args.settle_s, args.sample_s))[0]))
        print(", ".join(f"{label} {mb:.1f} MB" for label, mb in out), flush=True)
        await asyncio.sleep(args.idle_after_s)
        out.append((f"after {args.idle_after_s:.0f} s idle",
                    (await _idle_rss(proc.pid, 0, args.sample_s))[0]))
        if args.trim:
            out.append(("then malloc_trim(0)", _trimmed_rss(proc.pid)))
    return out


async def _bare(peers: Peers, settle_s: float, sample_s: float) -> tuple[float, float]:
    port = free_port()
    argv = [sys.executable, "-m", "bench.bare", str(port)]
    async with _started(argv, _env(peers, port, "env"), port, "/") as proc:
        return await _idle_rss(proc.pid, settle_s, sample_s)


def _line(label: str, rss: tuple[float, float], settle_s: float, sample_s: float) -> str:
    return (f"{label}: RSS {rss[0]:.1f} MB, highest {rss[1]:.1f} MB over {sample_s:.0f} s "
            f"after {settle_s:.0f} s")


async def run(args: argparse.Namespace) -> None:
    with started_peers("mwr") as peers:
        if args.load:
            load = os.getloadavg()[0]
            steps = await _after_load(peers, args)
            print(f"serve under load (trust {args.trust}"
                  + (f", {' '.join(args.env)}" if args.env else "") + "): "
                  + ", ".join(f"{label} {mb:.1f} MB" for label, mb in steps)
                  + f" (load average at the start {load:.2f})", flush=True)
        serves = []
        for n in range(args.runs):
            serves.append(await _service(peers, "serve", args.trust, args.settle_s,
                                         args.sample_s))
            print(_line(f"serve run {n + 1} (trust {args.trust})", serves[-1], args.settle_s,
                        args.sample_s), flush=True)
        bare = await _bare(peers, args.settle_s, args.sample_s)
        print(_line("bare (bench.bare, same server)", bare, args.settle_s, args.sample_s))
        if args.baseline_src:
            base = await _service(peers, "serve", args.trust, args.settle_s, args.sample_s,
                                  src=args.baseline_src)
            print(_line(f"baseline serve from {args.baseline_src} (trust {args.trust})", base,
                        args.settle_s, args.sample_s))
        if args.with_run:
            ran = await _service(peers, "run", args.trust, args.settle_s, args.sample_s)
            print(_line(f"messageweave run (trust {args.trust})", ran, args.settle_s,
                        args.sample_s))
        last = [s[0] for s in serves]
        print(f"idle messageweave serve (configured, enabled, no traffic, trust {args.trust}): "
              f"RSS {' / '.join(f'{v:.1f}' for v in last)} MB over {args.runs} runs; "
              f"bare server {bare[0]:.1f} MB")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1, help="fresh serve processes, one by one")
    parser.add_argument("--settle-s", type=float, default=5.0)
    parser.add_argument("--sample-s", type=float, default=3.0)
    parser.add_argument("--trust", choices=("env", "certifi"), default="env")
    parser.add_argument("--with-run", action="store_true", help="also measure `messageweave run`")
    parser.add_argument("--baseline-src", help="also measure `serve` with this package tree")
    parser.add_argument("--load", action="store_true",
                        help="also a serve measured idle, after a load and idle after it")
    parser.add_argument("--load-mails", type=int, default=200)
    parser.add_argument("--load-help", type=int, default=50)
    parser.add_argument("--load-s", type=float, default=20.0)
    parser.add_argument("--idle-after-s", type=float, default=600.0)
    parser.add_argument("--trim", action="store_true",
                        help="with --load: sample again after malloc_trim(0) (gdb)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--updates", choices=("webhook", "auto"), default="webhook",
                        help="telegram_updates of the idle serves (auto: the poller runs)")
    args = parser.parse_args()
    UPDATES[0] = args.updates
    EXTRA_ENV.update(item.split("=", 1) for item in args.env)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
